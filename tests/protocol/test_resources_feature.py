"""Resource fan-out between replicas: subscriptions live in the session store, and the replica
that sees a change notifies every subscribed session once, whichever replica took the
subscribe."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from appdeck.events.signals import LocalBroadcast

from .conftest import ALICE, BOB
from .doubles import MemorySessionStore
from .replicas import Replica, until


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Replica, Replica]]:
    store, broadcast = MemorySessionStore(), LocalBroadcast()
    a, b = Replica("aaaa", store, broadcast), Replica("bbbb", store, broadcast)
    await a.server.start()
    await b.server.start()
    yield a, b
    await a.close()
    await b.close()


def updates(replica: Replica) -> list[tuple[str, str]]:
    return [
        (sid, m["params"]["uri"])
        for sid, m in replica.outbox.sent
        if m["method"] == "notifications/resources/updated"
    ]


async def test_an_update_seen_on_one_replica_reaches_a_subscribe_taken_on_another(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    alice = await a.init(ALICE)
    bob = await b.init(BOB)
    reply = await a.request(
        "resources/subscribe", {"uri": "test://a"}, await a.call(ALICE, alice.id)
    )
    assert reply["result"] == {}
    await b.server.resources.updated("test://a")
    await b.server.resources.updated("test://c")
    assert updates(b) == [(alice.id, "test://a")]  # once, by the replica that saw the change
    assert updates(a) == []
    await b.server.resources.updated("test://a", tenant="elsewhere")
    assert len(updates(b)) == 1
    assert bob.id not in [sid for sid, _ in updates(b)]


async def test_an_unsubscribe_on_another_replica_stops_the_updates(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    session = await a.init(ALICE)
    await a.request("resources/subscribe", {"uri": "test://a"}, await a.call(ALICE, session.id))
    on_b = await b.call(ALICE, session.id)
    assert on_b.session is not None
    await b.request("resources/unsubscribe", {"uri": "test://a"}, on_b)
    await until(lambda: session.subscriptions == set())  # A's cached copy followed
    await a.server.resources.updated("test://a")
    assert updates(a) == []


async def test_losing_read_access_ends_subscriptions_taken_on_any_replica(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    first = await a.init(ALICE)
    second = await b.init(ALICE)
    bob = await a.init(BOB)
    for replica, session, who in ((a, first, ALICE), (b, second, ALICE), (a, bob, BOB)):
        call = await replica.call(who, session.id)
        for uri in ("test://a", "test://a/b", "test://c"):
            await replica.request("resources/subscribe", {"uri": uri}, call)
    assert await b.server.resources.unsubscribe_user("acme", "alice", "test://a") == 2
    await until(lambda: first.subscriptions == {"test://c"})
    assert second.subscriptions == {"test://c"}
    assert bob.subscriptions == {"test://a", "test://a/b", "test://c"}
    await a.server.resources.updated("test://a/b")
    assert updates(a) == [(bob.id, "test://a/b")]


async def test_list_changed_reaches_sessions_no_replica_caches(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    session = await a.init(ALICE)
    await a.sessions.drop(session)
    kept = await a.init(ALICE)
    other = await a.init(BOB)
    a.sessions._cache.clear()  # as after a restart: the store still holds the sessions
    await b.server.resources.list_changed(tenant="acme")
    assert sorted(b.outbox.methods(kept.id) + b.outbox.methods(other.id)) == [
        "notifications/resources/list_changed",
        "notifications/resources/list_changed",
    ]
    assert b.outbox.methods(session.id) == []
