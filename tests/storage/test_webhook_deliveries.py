"""Webhook deliveries on SQLite and PostgreSQL: a body or an id taken once per app, each app
on its own, rows gone past the window, at most MAX_PER_APP kept, and an app's going with it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from appdeck.storage import Storage, webhook_deliveries
from appdeck.storage.apps import AppStore
from appdeck.storage.schema import webhook_deliveries as table
from appdeck.storage.webhook_deliveries import WebhookDeliveries

DAY = 86_400.0


async def _app(storage: Storage, name: str) -> int:
    return (await AppStore(storage.engine).create("acme", name, None, {}, "alice")).id


async def _rows(storage: Storage) -> int:
    async with storage.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar())


async def test_a_body_or_an_id_is_taken_once_per_app(storage: Storage) -> None:
    store = WebhookDeliveries(storage.engine)
    shop, blog = await _app(storage, "shop"), await _app(storage, "blog")
    assert await store.first(shop, "a" * 64, "id-1", window_s=DAY)
    assert not await store.first(shop, "a" * 64, "id-1", window_s=DAY)  # byte for byte
    assert not await store.first(shop, "a" * 64, "id-2", window_s=DAY)  # the body renamed
    assert not await store.first(shop, "b" * 64, "id-1", window_s=DAY)  # the id, another body
    assert await store.first(shop, "c" * 64, None, window_s=DAY)
    assert not await store.first(shop, "c" * 64, None, window_s=DAY)
    assert await store.first(blog, "a" * 64, "id-1", window_s=DAY)  # another app's own
    await store.forget(shop, "c" * 64)
    assert await store.first(shop, "c" * 64, None, window_s=DAY)


async def test_rows_past_the_window_go_and_an_app_keeps_at_most_its_cap(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = WebhookDeliveries(storage.engine)
    shop = await _app(storage, "shop")
    assert await store.first(shop, "a" * 64, "old", window_s=DAY)
    assert await store.first(shop, "b" * 64, "new", window_s=-1)  # the old one is past it
    assert await _rows(storage) == 1
    assert await store.first(shop, "a" * 64, "old", window_s=DAY)  # taken again: forgotten
    monkeypatch.setattr(webhook_deliveries, "MAX_PER_APP", 3)
    for n in range(6):
        assert await store.first(shop, f"{n:064d}", f"id-{n}", window_s=DAY)
    assert await _rows(storage) == 3
    assert not await store.first(shop, f"{5:064d}", None, window_s=DAY)  # the newest kept
    await AppStore(storage.engine).delete(shop)
    assert await _rows(storage) == 0
