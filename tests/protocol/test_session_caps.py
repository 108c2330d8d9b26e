"""Per-user and per-token session caps: a user at a cap loses their own least recently active
session, never anybody else's, and never gets a 503."""

from __future__ import annotations

from appdeck.common.identity import Principal
from appdeck.protocol.sessions import Session, SessionManager

from .doubles import MemorySessionStore

A1 = Principal("acme", "alice", kind="oauth", token_id="jti-1")
A2 = Principal("acme", "alice", kind="oauth", token_id="jti-2")
B = Principal("other", "bob", kind="oauth", token_id="jti-b")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0  # every call is a moment later
        return self.now


def manager(
    store: MemorySessionStore, *, per_user: int = 3, per_token: int = 2, total: int = 1000
) -> tuple[SessionManager, list[str]]:
    sessions = SessionManager(
        store,
        max_sessions=total,
        max_per_user=per_user,
        max_per_token=per_token,
        clock=Clock(),
    )
    dropped: list[str] = []

    async def on_drop(session: Session) -> None:
        dropped.append(session.id)

    sessions.on_drop(on_drop)
    return sessions, dropped


async def new(sessions: SessionManager, principal: Principal) -> Session:
    return await sessions.create(principal, "2025-11-25", {}, {})


async def test_a_user_at_the_cap_loses_their_least_recently_active_session() -> None:
    store = MemorySessionStore()
    sessions, dropped = manager(store, per_token=10)
    first = await new(sessions, A1)
    second = await new(sessions, A2)
    third = await new(sessions, A1)
    await sessions.get(first.id)  # now the first is the most recently active
    fourth = await new(sessions, A2)
    assert dropped == [second.id]  # the listeners ran: streams and subscriptions go
    assert set(store.rows) == {first.id, third.id, fourth.id}
    assert await sessions.get(second.id) is None
    assert sessions.evicted == 1


async def test_a_token_at_its_cap_loses_its_own_oldest_session_not_another_tokens() -> None:
    store = MemorySessionStore()
    sessions, dropped = manager(store, per_user=10, per_token=2)
    other = await new(sessions, A2)
    first = await new(sessions, A1)
    second = await new(sessions, A1)
    third = await new(sessions, A1)
    assert dropped == [first.id]
    assert set(store.rows) == {other.id, second.id, third.id}
    assert store.rows[third.id].token_id == "jti-1"


async def test_one_user_flooding_initialize_never_touches_another_users_sessions() -> None:
    store = MemorySessionStore()
    sessions, _ = manager(store, per_user=5, per_token=5, total=20)
    bobs = [await new(sessions, B) for _ in range(3)]
    for _ in range(500):
        await new(sessions, A1)
    owners = [s.user for s in store.rows.values()]
    assert owners.count("alice") == 5
    assert {s.id for s in bobs} <= set(store.rows)
    assert (await new(sessions, B)).user == "bob"  # the global cap (20) is never reached


async def test_concurrent_initializes_of_one_user_stay_within_the_cap() -> None:
    import asyncio

    store = MemorySessionStore()
    sessions, _ = manager(store, per_user=4, per_token=4)
    await asyncio.gather(*(new(sessions, A1) for _ in range(50)))
    assert len(store.rows) == 4
    assert sessions._creating == {}  # the per-user locks are gone once unused


async def test_a_session_deleted_elsewhere_stops_being_served_after_the_next_sweep() -> None:
    store = MemorySessionStore()
    sessions, dropped = manager(store)
    mine, other = await new(sessions, A1), await new(sessions, B)
    del store.rows[mine.id]  # what `appdeck session drop` or another replica does
    assert sessions.cached(mine.id) is mine  # until the sweep, this process still holds it
    await sessions.sweep()
    assert sessions.cached(mine.id) is None
    assert await sessions.get(mine.id) is None
    assert dropped == [mine.id]  # its streams are closed by the drop listeners
    assert await sessions.get(other.id) is other
