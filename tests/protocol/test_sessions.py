"""SessionManager between replicas: each caches sessions in front of one store; a change or a
drop on one reaches the others' caches (signal, then a re-read of the store), and a lost
signal is covered by the periodic re-check and by a re-check of everything after the
broadcast reconnects."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from appdeck.events.signals import LocalBroadcast
from appdeck.protocol.errors import InvalidParams, SessionNotFound
from appdeck.protocol.sessions import SESSION_CHANNEL, Session, SessionChange, SessionManager

from .conftest import ALICE, BOB
from .doubles import MemorySessionStore
from .replicas import until


class Deaf(LocalBroadcast):
    """Publishes nowhere (every signal lost); reconnects when the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.callbacks: list[Callable[[], None]] = []

    async def publish(self, channel: str, payload: bytes) -> None:
        return None

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def reconnect(self) -> None:
        for callback in self.callbacks:
            callback()


class Node:
    def __init__(
        self,
        name: str,
        store: MemorySessionStore,
        broadcast: LocalBroadcast,
        recheck: float | None = None,
    ) -> None:
        self.sessions = SessionManager(
            store, broadcast=broadcast, instance_id=name, recheck_seconds=recheck
        )
        self.dropped: list[str] = []

        async def on_drop(session: Session) -> None:
            self.dropped.append(session.id)

        self.sessions.on_drop(on_drop)


@pytest.fixture
async def nodes() -> AsyncIterator[tuple[Node, Node, MemorySessionStore]]:
    store, broadcast = MemorySessionStore(), LocalBroadcast()
    a, b = Node("a", store, broadcast), Node("b", store, broadcast)
    await a.sessions.start()
    await b.sessions.start()
    yield a, b, store
    await a.sessions.close()
    await b.sessions.close()


async def test_a_change_on_one_replica_reaches_the_cached_copy_on_another(
    nodes: tuple[Node, Node, MemorySessionStore],
) -> None:
    a, b, store = nodes
    session = await a.sessions.create(ALICE, "2025-11-25", {}, {})
    on_b = await b.sessions.get(session.id)
    assert on_b is not None
    await a.sessions.change(session, SessionChange(log_level="error", subscribe="test://x"))
    await until(lambda: on_b.log_level == "error")
    assert on_b.subscriptions == {"test://x"}
    assert store.rows[session.id].subscriptions == {"test://x"}


async def test_changes_from_two_replicas_with_stale_caches_both_land(
    nodes: tuple[Node, Node, MemorySessionStore],
) -> None:
    a, b, store = nodes
    session = await a.sessions.create(ALICE, "2025-11-25", {}, {})
    on_b = await b.sessions.get(session.id)
    assert on_b is not None
    # neither cache has seen the other's change yet: the store applies each to its row
    await a.sessions.change(session, SessionChange(subscribe="test://1"))
    await b.sessions.change(on_b, SessionChange(subscribe="test://2"))
    assert store.rows[session.id].subscriptions == {"test://1", "test://2"}
    assert on_b.subscriptions == {"test://1", "test://2"}
    await until(lambda: session.subscriptions == {"test://1", "test://2"})


async def test_a_drop_on_one_replica_ends_the_session_on_another(
    nodes: tuple[Node, Node, MemorySessionStore],
) -> None:
    a, b, _ = nodes
    session = await a.sessions.create(ALICE, "2025-11-25", {}, {})
    assert await b.sessions.get(session.id) is not None
    await a.sessions.drop(session)
    await until(lambda: b.dropped == [session.id])  # its drop listeners ran: streams closed
    assert b.sessions.cached(session.id) is None
    assert await b.sessions.get(session.id) is None


async def test_a_change_of_a_session_ended_elsewhere_is_session_not_found(
    nodes: tuple[Node, Node, MemorySessionStore],
) -> None:
    a, _, store = nodes
    session = await a.sessions.create(ALICE, "2025-11-25", {}, {})
    del store.rows[session.id]  # e.g. appdeck session drop, straight in the database
    with pytest.raises(SessionNotFound):
        await a.sessions.change(session, SessionChange(log_level="error"))
    assert a.dropped == [session.id]


async def test_the_subscription_cap_holds_across_replicas(
    nodes: tuple[Node, Node, MemorySessionStore],
) -> None:
    a, b, _ = nodes
    session = await a.sessions.create(ALICE, "2025-11-25", {}, {})
    on_b = await b.sessions.get(session.id)
    assert on_b is not None
    await a.sessions.change(session, SessionChange(subscribe="u1", max_subscriptions=2))
    await b.sessions.change(on_b, SessionChange(subscribe="u2", max_subscriptions=2))
    with pytest.raises(InvalidParams):
        await a.sessions.change(session, SessionChange(subscribe="u3", max_subscriptions=2))
    # already there: not a new subscription, so not refused
    await a.sessions.change(session, SessionChange(subscribe="u1", max_subscriptions=2))


async def test_a_lost_signal_is_covered_by_the_periodic_recheck() -> None:
    store, deaf = MemorySessionStore(), Deaf()
    a = Node("a", store, deaf, recheck=0.0)  # every use re-reads (the test needs no clock)
    b = Node("b", store, deaf, recheck=None)
    session = await b.sessions.create(ALICE, "2025-11-25", {}, {})
    on_a = await a.sessions.get(session.id)
    assert on_a is not None
    await b.sessions.change(session, SessionChange(log_level="critical"))
    assert on_a.log_level == "debug"  # the signal was lost
    again = await a.sessions.get(session.id)
    assert again is on_a
    assert on_a.log_level == "critical"
    del store.rows[session.id]
    assert await a.sessions.get(session.id) is None
    assert a.dropped == [session.id]


async def test_without_a_recheck_a_cached_session_is_reread_after_the_broadcast_reconnects() -> (
    None
):
    store, deaf = MemorySessionStore(), Deaf()
    a, b = Node("a", store, deaf), Node("b", store, deaf)
    await a.sessions.start()
    session = await b.sessions.create(ALICE, "2025-11-25", {}, {})
    on_a = await a.sessions.get(session.id)
    assert on_a is not None
    await b.sessions.change(session, SessionChange(subscribe="test://y"))
    assert (await a.sessions.get(session.id)) is on_a
    assert on_a.subscriptions == set()  # no recheck configured, signal lost: still stale
    deaf.reconnect()
    await a.sessions.get(session.id)
    assert on_a.subscriptions == {"test://y"}


async def test_an_idle_looking_cached_copy_is_reread_before_it_is_expired() -> None:
    store, deaf = MemorySessionStore(), Deaf()
    now = [1000.0]
    a = SessionManager(
        store,
        broadcast=deaf,
        instance_id="a",
        idle_timeout=60,
        recheck_seconds=0.0,
        clock=lambda: now[0],
    )
    session = await a.create(ALICE, "2025-11-25", {}, {})
    now[0] += 100  # idle here, but another replica served the session meanwhile
    store.rows[session.id].last_active = now[0] - 5
    assert await a.get(session.id) is session


async def test_malformed_or_own_signals_are_ignored(
    nodes: tuple[Node, Node, MemorySessionStore],
) -> None:
    a, b, _ = nodes
    session = await a.sessions.create(BOB, "2025-11-25", {}, {})
    assert await b.sessions.get(session.id) is not None
    broadcast = a.sessions._broadcast
    assert broadcast is not None
    for payload in (
        b"",
        b"null",
        b"[]",
        b'{"id": 5}',
        b'{"id": ""}',
        b"x" * 5000,
        b'{"id": "' + b"s" * 200 + b'"}',
        b"\xff",
    ):
        await broadcast.publish(SESSION_CHANNEL, payload)
    await broadcast.publish(SESSION_CHANNEL, b'{"id": "%s", "from": "a"}' % session.id.encode())
    assert a.sessions.cached(session.id) is session  # its own signal: nothing re-read
    assert b.dropped == []
    assert a.dropped == []


async def test_one_process_without_a_broadcast_behaves_as_before() -> None:
    store = MemorySessionStore()
    sessions = SessionManager(store)
    await sessions.start()
    session = await sessions.create(ALICE, "2025-11-25", {}, {})
    await sessions.change(session, SessionChange(log_level="info", subscribe="test://z"))
    assert store.rows[session.id].log_level == "info"
    assert await sessions.subscribers("test://z") == [session.id]
    assert await sessions.session_ids("acme") == [session.id]
    assert await sessions.session_ids("other") == []
    await sessions.close()


async def test_owned_sessions_lists_a_users_sessions_on_every_replica_newest_first(
    nodes: tuple[Node, Node, MemorySessionStore],
) -> None:
    a, b, _ = nodes
    first = await a.sessions.create(ALICE, "2025-11-25", {"name": "one"}, {})
    second = await b.sessions.create(ALICE, "2025-06-18", {"name": "two"}, {})
    await b.sessions.create(BOB, "2025-11-25", {}, {})
    second.last_active = first.last_active + 1
    listed = await a.sessions.owned_sessions(ALICE.tenant, ALICE.user)
    assert {s.id for s in listed} == {first.id, second.id}
    assert await a.sessions.owned_sessions("nobody", ALICE.user) == []


async def test_end_owned_ends_the_owners_session_on_every_replica_and_nobody_elses(
    nodes: tuple[Node, Node, MemorySessionStore],
) -> None:
    a, b, store = nodes
    session = await a.sessions.create(ALICE, "2025-11-25", {}, {})
    assert await b.sessions.get(session.id) is not None
    assert not await b.sessions.end_owned(BOB.tenant, BOB.user, session.id)  # not Bob's
    assert not await b.sessions.end_owned(ALICE.tenant, ALICE.user, "x" * 129)
    assert not await b.sessions.end_owned(ALICE.tenant, ALICE.user, "unknown")
    assert session.id in store.rows
    assert await b.sessions.end_owned(ALICE.tenant, ALICE.user, session.id)
    await until(lambda: a.dropped == [session.id])  # a's streams closed too
    assert b.dropped == [session.id]
    assert session.id not in store.rows
    assert await a.sessions.get(session.id) is None
