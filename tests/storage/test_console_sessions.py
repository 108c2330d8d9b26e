"""Console sessions in the database: found by the cookie's hash until they expire, capped per
user, listed per user and tenant, ended one by one or all of a user's (SQLite and PostgreSQL)."""

from __future__ import annotations

from appdeck.common.tokens import token_hash
from appdeck.storage import Storage
from appdeck.storage.console_sessions import MAX_PER_USER, ConsoleSessionRow, ConsoleSessionStore


def row(n: int, *, user: str = "u1", tenant: str = "acme", at: float = 1000.0) -> ConsoleSessionRow:
    return ConsoleSessionRow(
        id=f"s{n}",
        tenant_id=tenant,
        user_id=user,
        csrf=f"c{n}",
        ip="127.0.0.1",
        user_agent="test",
        created_at=at + n,
        last_seen=at + n,
        expires_at=at + n + 100,
    )


async def test_a_session_is_found_by_its_secret_hash_until_it_expires(storage: Storage) -> None:
    store = ConsoleSessionStore(storage.engine)
    await store.create(row(1), token_hash("secret-1"))
    found = await store.find(token_hash("secret-1"), now=1050)
    assert found is not None
    assert (found.id, found.csrf, found.user_id) == ("s1", "c1", "u1")
    assert await store.find(token_hash("secret-2"), now=1050) is None
    assert await store.find(token_hash("secret-1"), now=1101) is None  # expired
    await store.touch("s1", now=1060, expires_at=2000)
    assert await store.find(token_hash("secret-1"), now=1500) is not None
    assert await store.purge(now=3000) == 1


async def test_signing_in_past_the_cap_ends_the_users_oldest_sessions(storage: Storage) -> None:
    store = ConsoleSessionStore(storage.engine)
    for n in range(MAX_PER_USER + 3):
        await store.create(row(n), token_hash(f"secret-{n}"))
    await store.create(row(99, user="u2"), token_hash("other"))
    kept = await store.for_user("acme", "u1", now=1000)
    assert len(kept) == MAX_PER_USER
    assert {r.id for r in kept} == {f"s{n}" for n in range(3, MAX_PER_USER + 3)}
    assert await store.find(token_hash("secret-0"), now=1000) is None
    assert len(await store.for_tenant("acme", now=1000)) == MAX_PER_USER + 1


async def test_a_session_ends_only_within_its_tenant_and_user(storage: Storage) -> None:
    store = ConsoleSessionStore(storage.engine)
    await store.create(row(1), token_hash("a"))
    await store.create(row(2, tenant="globex", user="u9"), token_hash("b"))
    assert not await store.delete("globex", "s1")  # another tenant's id: not found
    assert not await store.delete("acme", "s1", user_id="u2")  # another user's
    assert await store.delete("acme", "s1", user_id="u1")
    assert await store.delete_user("globex", "u9") == 1
    assert await store.for_tenant("acme", now=0) == []
