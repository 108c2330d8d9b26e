"""SqlSessionStore: the durable home of sessions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import sqlalchemy as sa

from appdeck.protocol.errors import InvalidParams
from appdeck.protocol.sessions import Session, SessionChange
from appdeck.storage import Storage
from appdeck.storage.engine import create_engine
from appdeck.storage.sessions import SqlSessionStore


def make_session(session_id: str = "s1", **changes: Any) -> Session:
    fields: dict[str, Any] = {
        "id": session_id,
        "tenant": "acme",
        "user": "ada",
        "protocol_version": "2025-11-25",
        "client_info": {"name": "claude", "version": "1.2"},
        "client_capabilities": {"elicitation": {}, "roots": {"listChanged": True}},
        "created_at": 1_700_000_000.25,
        "last_active": 1_700_000_100.5,
    }
    fields.update(changes)
    return Session(**fields)


async def test_a_session_survives_a_reload_from_the_store(storage: Storage) -> None:
    session = make_session(
        client_info={"name": "Éditeur ✓", "nested": {"list": [1, 2.5, None, True], "n": None}},
        log_level="warning",
        initialized=True,
        subscriptions={"appdeck://apps/b", "appdeck://apps/a"},
    )
    await storage.sessions.insert(session)
    assert await storage.sessions.load("s1") == session


async def test_subscriptions_are_stored_as_a_sorted_list(storage: Storage) -> None:
    await storage.sessions.insert(make_session(subscriptions={"c", "a", "b"}))
    async with storage.engine.connect() as conn:
        raw = await conn.scalar(sa.text("SELECT subscriptions FROM sessions"))
    assert (json.loads(raw) if isinstance(raw, str) else raw) == ["a", "b", "c"]


async def test_loading_an_unknown_session_gives_none(storage: Storage) -> None:
    assert await storage.sessions.load("nope") is None


async def test_a_session_id_is_stored_only_once(storage: Storage) -> None:
    await storage.sessions.insert(make_session())
    with pytest.raises(sa.exc.IntegrityError):
        await storage.sessions.insert(make_session())


async def test_an_update_rewrites_the_protocol_state_of_that_session_only(
    storage: Storage,
) -> None:
    await storage.sessions.insert(make_session("s1"))
    await storage.sessions.insert(make_session("s2"))
    changed = make_session(
        "s1",
        protocol_version="2025-03-26",
        client_capabilities={},
        last_active=1_700_000_200.0,
        log_level="error",
        initialized=True,
        subscriptions={"appdeck://apps/x"},
    )
    await storage.sessions.update(changed)
    assert await storage.sessions.load("s1") == changed
    assert await storage.sessions.load("s2") == make_session("s2")


async def test_a_deleted_session_is_gone_and_deleting_it_again_is_harmless(
    storage: Storage,
) -> None:
    await storage.sessions.insert(make_session("s1"))
    await storage.sessions.insert(make_session("s2"))
    await storage.sessions.delete("s1")
    await storage.sessions.delete("s1")
    assert await storage.sessions.load("s1") is None
    assert await storage.sessions.load("s2") is not None


async def test_touch_records_many_activity_times_in_one_batch(storage: Storage) -> None:
    for sid in ("a", "b", "c"):
        await storage.sessions.insert(make_session(sid, last_active=100.0))
    await storage.sessions.touch({"a": 150.0, "b": 175.5, "unknown": 999.0})
    actives = {sid: (await storage.sessions.load(sid)) for sid in ("a", "b", "c")}
    assert {sid: s.last_active for sid, s in actives.items() if s} == {
        "a": 150.0,
        "b": 175.5,
        "c": 100.0,
    }
    assert await storage.sessions.count() == 3


async def test_touch_never_moves_activity_back_in_time(storage: Storage) -> None:
    await storage.sessions.insert(make_session("a", last_active=200.0))
    await storage.sessions.touch({"a": 150.0})
    loaded = await storage.sessions.load("a")
    assert loaded is not None
    assert loaded.last_active == 200.0


async def test_touch_with_nothing_to_record_does_nothing(storage: Storage) -> None:
    await storage.sessions.touch({})
    assert await storage.sessions.count() == 0


async def test_idle_since_lists_the_sessions_last_active_before_the_cutoff(
    storage: Storage,
) -> None:
    for sid, last_active in {"old": 10.0, "edge": 20.0, "fresh": 30.0}.items():
        await storage.sessions.insert(make_session(sid, last_active=last_active))
    assert await storage.sessions.idle_since(20.0) == ["old"]
    assert sorted(await storage.sessions.idle_since(30.5)) == ["edge", "fresh", "old"]
    assert await storage.sessions.idle_since(5.0) == []


async def test_idle_since_follows_touched_activity(storage: Storage) -> None:
    await storage.sessions.insert(make_session("a", last_active=10.0))
    await storage.sessions.touch({"a": 50.0})
    assert await storage.sessions.idle_since(20.0) == []


async def test_count_follows_inserts_and_deletes(storage: Storage) -> None:
    assert await storage.sessions.count() == 0
    for sid in ("a", "b"):
        await storage.sessions.insert(make_session(sid))
    assert await storage.sessions.count() == 2
    await storage.sessions.delete("a")
    assert await storage.sessions.count() == 1


async def test_owned_lists_a_users_sessions_least_recently_active_first(storage: Storage) -> None:
    store = storage.sessions
    await store.insert(make_session("late", last_active=300.0, token_id="jti-1"))
    await store.insert(make_session("early", last_active=100.0, token_id="jti-2"))
    await store.insert(make_session("middle", last_active=200.0))
    await store.insert(make_session("other-user", user="bob", last_active=50.0))
    await store.insert(make_session("other-tenant", tenant="else", last_active=50.0))
    assert await store.owned("acme", "ada") == [
        ("early", 100.0, "jti-2"),
        ("middle", 200.0, None),
        ("late", 300.0, "jti-1"),
    ]
    assert (await store.load("late")).token_id == "jti-1"  # type: ignore[union-attr]


async def test_present_names_the_sessions_still_stored_across_many_chunks(
    storage: Storage,
) -> None:
    for sid in ("kept", "gone"):
        await storage.sessions.insert(make_session(sid))
    await storage.sessions.delete("gone")
    asked = ["kept", "gone", *(f"never-{i}" for i in range(1200))]
    assert await storage.sessions.present(asked) == {"kept"}
    assert await storage.sessions.present([]) == set()


# -- several replicas (issue 13) --------------------------------------------------------------


async def test_a_change_is_applied_to_the_stored_row_and_returned(storage: Storage) -> None:
    await storage.sessions.insert(make_session("s1", subscriptions={"u1"}))
    fresh = await storage.sessions.change(
        "s1", SessionChange(log_level="error", subscribe="u2", unsubscribe=frozenset({"u1"}))
    )
    assert fresh is not None
    assert (fresh.log_level, fresh.subscriptions) == ("error", {"u2"})
    assert await storage.sessions.load("s1") == fresh
    assert await storage.sessions.change("gone", SessionChange(log_level="error")) is None


async def test_a_refused_subscribe_changes_nothing(storage: Storage) -> None:
    await storage.sessions.insert(make_session("s1", subscriptions={"u1", "u2"}))
    with pytest.raises(InvalidParams):
        await storage.sessions.change(
            "s1", SessionChange(log_level="error", subscribe="u3", max_subscriptions=2)
        )
    stored = await storage.sessions.load("s1")
    assert stored is not None
    assert (stored.log_level, stored.subscriptions) == ("debug", {"u1", "u2"})


async def test_concurrent_changes_from_two_replicas_all_land(
    storage: Storage, database_url: str
) -> None:
    other = create_engine(database_url)  # another process's pool on the same database
    try:
        stores = [storage.sessions, SqlSessionStore(other)]
        await storage.sessions.insert(make_session("s1"))
        uris = [f"appdeck://apps/{n}" for n in range(30)]
        async with asyncio.timeout(60):
            await asyncio.gather(
                *(
                    stores[n % 2].change("s1", SessionChange(subscribe=uri))
                    for n, uri in enumerate(uris)
                )
            )
        stored = await storage.sessions.load("s1")
        assert stored is not None
        assert stored.subscriptions == set(uris)
    finally:
        await other.dispose()


async def test_subscribers_are_the_sessions_following_exactly_that_uri(storage: Storage) -> None:
    odd = 'appdeck://apps/"q\\\\x"/é'
    await storage.sessions.insert(make_session("s1", subscriptions={"appdeck://a_b", odd}))
    await storage.sessions.insert(make_session("s2", subscriptions={"appdeck://aXb"}))
    await storage.sessions.insert(
        make_session("s3", tenant="other", subscriptions={"appdeck://a_b"})
    )
    await storage.sessions.insert(make_session("s4", subscriptions={"appdeck://a_b/c", "x%"}))
    assert sorted(await storage.sessions.subscribers("appdeck://a_b", None)) == ["s1", "s3"]
    assert await storage.sessions.subscribers("appdeck://a_b", "acme") == ["s1"]
    assert await storage.sessions.subscribers("appdeck://aXb", "acme") == ["s2"]
    assert await storage.sessions.subscribers("appdeck://a%", "acme") == []
    assert await storage.sessions.subscribers("x%", "acme") == ["s4"]
    assert await storage.sessions.subscribers(odd, "acme") == ["s1"]
    assert await storage.sessions.subscribers("appdeck://a", "acme") == []


async def test_session_ids_lists_every_stored_session_or_a_tenants(storage: Storage) -> None:
    await storage.sessions.insert(make_session("s1"))
    await storage.sessions.insert(make_session("s2", tenant="other"))
    assert sorted(await storage.sessions.session_ids(None)) == ["s1", "s2"]
    assert await storage.sessions.session_ids("other") == ["s2"]


async def test_subscribers_finds_a_uri_only_the_stdlib_json_decodes(storage: Storage) -> None:
    lone = "appdeck://apps/\ud800"  # json.dumps escapes it; orjson refuses the escape
    await storage.sessions.insert(make_session("s1", subscriptions={lone, "appdeck://a"}))
    await storage.sessions.insert(make_session("s2", subscriptions={"appdeck://a"}))
    assert await storage.sessions.subscribers(lone, "acme") == ["s1"]
    assert sorted(await storage.sessions.subscribers("appdeck://a", "acme")) == ["s1", "s2"]
