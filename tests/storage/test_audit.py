"""The audit writer's own sinks, on both databases."""

from __future__ import annotations

import time
from typing import Any

from appdeck.storage import Storage
from appdeck.storage.audit import AuditStore, SqliteWriter


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
