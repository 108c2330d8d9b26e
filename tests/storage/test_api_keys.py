"""ApiKeyStore: keys stored by hash, the active-key limit checked in the insert's transaction,
revoke and rotate decided by one conditional update, last use kept at its latest."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from appdeck.common.errors import QuotaExceeded
from appdeck.storage import create_engine, migrate
from appdeck.storage.api_keys import ApiKeyRow, ApiKeyStore, RequiringApp
from appdeck.storage.schema import apps

NOW = time.time()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[ApiKeyStore]:
    engine = create_engine(database_url)
    await migrate(engine)
    async with engine.begin() as conn:
        for app_id, name, auth in ((1, "shop", "required"), (2, "blog", "none"), (3, "old", None)):
            spec = {"runtime": "python"} | ({"api_auth": auth} if auth else {})
            await conn.execute(
                sa.insert(apps).values(
                    id=app_id,
                    tenant_id="acme",
                    name=name,
                    spec=spec,
                    spec_version=1,
                    created_by="alice",
                    created_at=NOW,
                    updated_at=NOW,
                    needs_restart=False,
                )
            )
    try:
        yield ApiKeyStore(engine)
    finally:
        await engine.dispose()


def key(key_id: str, app_id: int = 1, **changes: object) -> ApiKeyRow:
    row = ApiKeyRow(
        id=key_id,
        app_id=app_id,
        name=f"name of {key_id}",
        prefix="adk_key_abcd",
        key_hash=f"hash-of-{key_id}",
        scopes=("read", "write"),
        created_by="alice",
        created_at=NOW,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


async def test_a_key_reads_back_as_it_was_stored_and_lists_newest_first(
    store: ApiKeyStore,
) -> None:
    first = key("key_1", expires_at=NOW + 60, scopes=("read",))
    second = key("key_2", created_at=NOW + 1)
    await store.insert(first, max_active=50, now=NOW)
    await store.insert(second, max_active=50, now=NOW)
    assert await store.get("key_1") == first
    assert await store.get("nope") is None
    assert [k.id for k in await store.for_app(1, offset=0, limit=10)] == ["key_2", "key_1"]
    assert [k.id for k in await store.for_app(1, offset=1, limit=10)] == ["key_1"]
    assert await store.for_app(2, offset=0, limit=10) == []


async def test_revoked_and_expired_keys_are_not_active_and_do_not_count(
    store: ApiKeyStore,
) -> None:
    await store.insert(key("key_live"), max_active=3, now=NOW)
    await store.insert(key("key_old", expires_at=NOW - 1), max_active=3, now=NOW)
    await store.insert(key("key_gone"), max_active=3, now=NOW)
    assert await store.revoke("key_gone", at=NOW) is True
    assert await store.revoke("key_gone", at=NOW + 5) is False  # once only
    assert (await store.get("key_gone")).revoked_at == NOW  # type: ignore[union-attr]
    assert [k.id for k in await store.active(NOW)] == ["key_live"]
    statuses = {k.id: k.status(NOW) for k in await store.for_app(1, offset=0, limit=10)}
    assert statuses == {"key_live": "active", "key_old": "expired", "key_gone": "revoked"}
    await store.insert(key("key_more"), max_active=3, now=NOW)  # 2 active of 3
    await store.insert(key("key_last"), max_active=3, now=NOW)
    with pytest.raises(QuotaExceeded):
        await store.insert(key("key_over"), max_active=3, now=NOW)
    await store.insert(key("key_b", app_id=2), max_active=3, now=NOW)  # per app
    assert await store.get("key_over") is None


async def test_concurrent_inserts_never_pass_the_limit(store: ApiKeyStore) -> None:
    async def one(n: int) -> bool:
        try:
            await store.insert(key(f"key_{n}", key_hash=f"h{n}"), max_active=5, now=NOW)
        except QuotaExceeded:
            return False
        return True

    made = await asyncio.gather(*(one(n) for n in range(12)))
    assert sum(made) == 5
    assert len(await store.active(NOW)) == 5


async def test_rotate_revokes_the_old_key_and_stores_the_new_in_one_step(
    store: ApiKeyStore,
) -> None:
    await store.insert(key("key_a"), max_active=1, now=NOW)
    new = key("key_b", key_hash="hash-b", rotated_from="key_a")
    old = await store.rotate("key_a", new, max_active=1, now=NOW + 2)  # the old one frees room
    assert old is not None
    assert old.revoked_at == NOW + 2
    assert await store.get("key_b") == new
    again = key("key_c", key_hash="hash-c", rotated_from="key_a")
    assert await store.rotate("key_a", again, max_active=5, now=NOW + 3) is None
    assert await store.get("key_c") is None
    elsewhere = key("key_d", app_id=2, key_hash="hash-d")
    assert await store.rotate("key_b", elsewhere, max_active=5, now=NOW) is None  # not app 2's
    assert (await store.get("key_b")).revoked_at is None  # type: ignore[union-attr]


async def test_a_rotation_over_the_limit_changes_nothing(store: ApiKeyStore) -> None:
    await store.insert(key("key_a", expires_at=NOW - 1), max_active=1, now=NOW)  # expired
    await store.insert(key("key_b"), max_active=1, now=NOW)
    with pytest.raises(QuotaExceeded):
        await store.rotate("key_a", key("key_c", key_hash="hash-c"), max_active=1, now=NOW)
    assert (await store.get("key_a")).revoked_at is None  # type: ignore[union-attr]
    assert await store.get("key_c") is None


async def test_last_use_keeps_the_latest_time(store: ApiKeyStore) -> None:
    await store.insert(key("key_a"), max_active=5, now=NOW)
    await store.insert(key("key_b", key_hash="hash-b"), max_active=5, now=NOW)
    await store.touch({"key_a": NOW + 10, "key_b": NOW + 5, "key_unknown": NOW})
    await store.touch({"key_a": NOW + 3})
    await store.touch({})
    assert (await store.get("key_a")).last_used_at == NOW + 10  # type: ignore[union-attr]
    assert (await store.get("key_b")).last_used_at == NOW + 5  # type: ignore[union-attr]


async def test_the_apps_requiring_a_key_are_those_whose_spec_says_so(store: ApiKeyStore) -> None:
    assert await store.requiring_apps() == [RequiringApp(1, "shop", "acme")]
