"""The audit writer's own sinks, on both databases."""

from __future__ import annotations

import time
from typing import Any

from appdeck.storage import Storage
from appdeck.storage.audit import AuditFilter, AuditStore, SqliteWriter


def row(i: int, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "ts": time.time(),
        "tenant_id": "acme",
        "user_id": "alice",
        "client_id": None,
        "event": "tool_call",
        "method": "tools/call",
        "tool": f"t{i}",
        "action": None,
        "app_id": i,
        "outcome": "ok",
        "status": 200,
        "duration_ms": 0.5,
        "request_id": str(i),
        "detail": None,
    }
    return base | extra


async def test_the_writer_sink_appends_large_batches_in_order(database_url: str) -> None:
    storage = await Storage.open(database_url)
    try:
        sink = await AuditStore.opener(database_url)()
        if database_url.startswith("sqlite"):
            assert isinstance(sink, SqliteWriter)
        await sink.append([row(i, detail={"task": True} if i == 3 else None) for i in range(2500)])
        await sink.close()
        rows = await AuditStore(storage.engine).tail(3000)
        assert [r["app_id"] for r in rows] == list(range(2500))
        assert rows[3]["detail"] == {"task": True}
    finally:
        await storage.close()


async def test_a_failed_batch_leaves_nothing_half_written(database_url: str) -> None:
    storage = await Storage.open(database_url)
    try:
        sink = await AuditStore.opener(database_url)()
        bad = row(1, detail={"x": object()})
        try:
            await sink.append([row(0), bad, row(2)])
        except Exception:
            pass
        else:
            raise AssertionError("a row that cannot be stored must fail its batch")
        await sink.append([row(3)])
        await sink.close()
        rows = await AuditStore(storage.engine).tail(10)
        assert [r["app_id"] for r in rows] == [3]
    finally:
        await storage.close()


async def test_search_reads_one_tenants_rows_filtered_newest_first_by_keyset(
    database_url: str,
) -> None:
    storage = await Storage.open(database_url)
    try:
        store = AuditStore(storage.engine)
        await store.append(
            [row(i, ts=1000.0 + i, user_id="bob" if i % 2 else "alice") for i in range(10)]
            + [row(99, tenant_id="globex", tool="t1")]
            + [row(50, event="token_revoked", tool=None, ts=2000.0)]
        )
        everything = await store.search(AuditFilter("acme"))
        assert [r["app_id"] for r in everything] == [50, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
        page = await store.search(AuditFilter("acme"), limit=3)
        assert [r["app_id"] for r in page] == [50, 9, 8]
        after = await store.search(AuditFilter("acme"), before_id=page[-1]["id"], limit=3)
        assert [r["app_id"] for r in after] == [7, 6, 5]
        bobs = await store.search(AuditFilter("acme", user_id="bob"))
        assert [r["app_id"] for r in bobs] == [9, 7, 5, 3, 1]
        assert [r["app_id"] for r in await store.search(AuditFilter("acme", app_id=4))] == [4]
        by_tool = await store.search(AuditFilter("acme", name="t1"))
        assert [r["app_id"] for r in by_tool] == [1]  # not globex's t1
        by_event = await store.search(AuditFilter("acme", name="token_revoked"))
        assert [r["app_id"] for r in by_event] == [50]
        window = await store.search(AuditFilter("acme", since=1002.0, until=1005.0))
        assert [r["app_id"] for r in window] == [4, 3, 2]
        capped = await store.search(AuditFilter("acme"), limit=10**9)
        assert len(capped) == 11  # the cap (MAX_PAGE) is above what exists
        assert len(await store.search(AuditFilter("acme"), limit=-5)) == 1
        assert await store.search(AuditFilter("nobody")) == []
    finally:
        await storage.close()
