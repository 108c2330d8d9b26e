from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from appdeck.auth.audit import MAX_TEXT, AuditEvent, AuditLog, as_row, bounded, scrub
from appdeck.common.identity import Principal
from appdeck.storage import Storage
from appdeck.storage.audit import AuditStore
from tests.support.wait import until

ALICE = Principal("acme", "alice", frozenset({"apps:read"}), kind="oauth", client_id="cli")


def test_scrub_drops_anything_that_looks_like_a_credential() -> None:
    detail = {
        "reason": "bad",
        "access_token": "x",
        "client_secret": "y",
        "Password": "z",
        "grant_type": "refresh_token",
        "code_verifier": "v",
    }
    assert scrub(detail) == {"reason": "bad", "grant_type": "refresh_token"}


class Sink:
    """A sink with the failures a database has: down (``up`` cleared), a row it refuses
    (``bad`` in its tool), a write that hangs (``hold`` cleared)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.batches: list[int] = []
        self.up = threading.Event()
        self.up.set()
        self.hold = threading.Event()
        self.hold.set()
        self.threads: set[str] = set()
        self.closed = False

    async def append(self, rows: list[dict[str, Any]]) -> None:
        self.threads.add(threading.current_thread().name)
        await asyncio.to_thread(self.hold.wait, 5)
        if not self.up.is_set():
            raise OSError("connection refused")
        if any(row.get("tool") == "bad" for row in rows):
            raise ValueError("invalid input syntax")
        self.batches.append(len(rows))
        self.rows.extend(rows)

    async def ping(self) -> None:
        if not self.up.is_set():
            raise OSError("connection refused")

    async def close(self) -> None:
        self.closed = True


def opener(sink: Sink) -> Callable[[], Awaitable[Sink]]:
    async def open_sink() -> Sink:
        return sink

    return open_sink


def tools(sink: Sink) -> list[str]:
    return [row["tool"] for row in sink.rows]


async def test_records_are_written_in_batches_from_the_writer_thread() -> None:
    sink = Sink()
    log = AuditLog(opener(sink), flush_seconds=0.01, batch=10)
    log.start()
    for i in range(25):
        log.record(AuditEvent(event="tool_call", outcome="ok", tool=f"t{i}"))
    await until(lambda: len(sink.rows) >= 25)
    await log.close()
    assert tools(sink) == [f"t{i}" for i in range(25)]
    assert max(sink.batches) <= 10
    assert sink.threads == {"audit-writer"}
    assert sink.closed


async def test_recording_never_waits_for_a_write_that_hangs() -> None:
    sink = Sink()
    sink.hold.clear()
    log = AuditLog(opener(sink), flush_seconds=0.01, batch=2)
    log.start()
    for i in range(1000):
        log.tool_called(ALICE, f"t{i}", None, None, False, 200, 1.0, str(i), False)
    # all 1000 recorded while the first write still hangs (the sink holds it up to 5 s):
    # none waited for a write. An order, not "within 0.5 s" (a loaded machine's guess)
    assert sink.batches == []
    sink.hold.set()
    await log.close()
    assert len(sink.rows) == 1000


async def test_a_bad_row_is_dropped_and_the_rest_of_its_batch_is_written() -> None:
    sink = Sink()
    log = AuditLog(opener(sink), flush_seconds=0.01)
    for name in ("a", "bad", "b"):
        log.record(AuditEvent(event="tool_call", outcome="ok", tool=name))
    await log.flush()
    assert tools(sink) == ["a", "b"]
    assert log.dropped == 1
    log.record(AuditEvent(event="tool_call", outcome="ok", tool="c"))  # not stuck on it
    await log.close()
    assert tools(sink) == ["a", "b", "c"]


async def test_rows_wait_for_a_database_that_is_down_and_nothing_is_lost() -> None:
    sink = Sink()
    sink.up.clear()
    log = AuditLog(opener(sink), flush_seconds=0.01)
    log.start()
    for name in ("a", "b"):
        log.record(AuditEvent(event="refused", outcome="denied", tool=name))
    await asyncio.sleep(0.1)
    assert sink.rows == []
    sink.up.set()
    await log.flush()
    assert tools(sink) == ["a", "b"]
    assert log.dropped == 0
    await log.close()


async def test_close_gives_up_on_a_database_that_stays_down_and_counts_the_loss() -> None:
    sink = Sink()
    sink.up.clear()
    log = AuditLog(opener(sink), flush_seconds=0.01, close_timeout=0.3)
    log.start()
    log.record(AuditEvent(event="refused", outcome="denied"))
    async with asyncio.timeout(5):
        await log.close()
    assert log.dropped == 1


async def test_a_full_queue_drops_and_counts_new_records() -> None:
    sink = Sink()
    log = AuditLog(opener(sink), max_queue=3)
    for i in range(5):
        log.record(AuditEvent(event="tool_call", outcome="ok", tool=f"t{i}"))
    assert log.dropped == 2
    await log.close()
    assert tools(sink) == ["t0", "t1", "t2"]


async def test_close_writes_what_a_never_started_log_queued() -> None:
    sink = Sink()
    log = AuditLog(opener(sink))
    log.record(AuditEvent(event="token_issued", outcome="ok"))
    await log.close()
    assert len(sink.rows) == 1


async def test_the_tool_call_row_has_every_column_and_no_arguments() -> None:
    sink = Sink()
    log = AuditLog(opener(sink))
    log.tool_called(ALICE, "echo", "get", 7, True, 200, 1.5, "42", True)
    log.refused(None, 401, "x" * 1000, "tools/call")
    await log.close()
    call, refusal = sink.rows
    assert call | {"ts": 0} == {
        "ts": 0,
        "tenant_id": "acme",
        "user_id": "alice",
        "client_id": "cli",
        "event": "tool_call",
        "method": "tools/call",
        "tool": "echo",
        "action": "get",
        "app_id": 7,
        "outcome": "error",
        "status": 200,
        "duration_ms": 1.5,
        "request_id": "42",
        "detail": {"task": True},
    }
    assert (refusal["event"], refusal["status"], refusal["tenant_id"]) == ("refused", 401, None)
    assert len(refusal["detail"]["reason"]) == 300


async def test_the_real_store_keeps_the_good_rows_of_a_batch_with_a_bad_one(
    database_url: str,
) -> None:
    storage = await Storage.open(database_url)
    try:
        log = AuditLog(AuditStore.opener(database_url), flush_seconds=0.01)
        log.start()
        log.record(AuditEvent(event="tool_call", outcome="ok", tool="before"))
        bad = as_row(AuditEvent(event="tool_call", outcome="ok", tool="bad"))
        bad["detail"] = {"x": object()}  # cannot be stored as JSON, on either database
        log._queue_row(bad)  # past record_row's bounding, which would make it storable
        log.record(AuditEvent(event="tool_call", outcome="ok", tool="after"))
        await log.close()
        rows = await AuditStore(storage.engine).tail(10)
        assert [r["tool"] for r in rows] == ["before", "after"]
        assert log.dropped == 1
    finally:
        await storage.close()


def test_every_value_is_fitted_to_its_column() -> None:
    row = as_row(AuditEvent(event="tool_call", outcome="ok", tool="t" * 5000, app_id=2**63))
    row["status"] = 2**40
    row["duration_ms"] = float("inf")
    row["detail"] = {"n": 2**70, "s": "x" * 5000, "o": object()}
    fitted = bounded(row)
    assert fitted["app_id"] is None
    assert fitted["status"] is None
    assert fitted["duration_ms"] is None
    assert len(fitted["tool"]) == MAX_TEXT
    assert fitted["detail"]["n"] == str(2**70)
    assert len(fitted["detail"]["s"]) == 1000
    assert isinstance(fitted["detail"]["o"], str)
    assert bounded(as_row(AuditEvent(event="e", outcome="ok", app_id=-(2**63))))["app_id"] == -(
        2**63
    )


async def test_tool_called_bounds_what_the_caller_chose() -> None:
    sink = Sink()
    log = AuditLog(opener(sink), flush_seconds=0.01)
    log.tool_called(ALICE, "n" * 5000, "a" * 5000, 2**63, True, 200, 1.0, "r" * 5000, False)
    await log.close()
    (row,) = sink.rows
    assert row["app_id"] is None
    assert len(row["tool"]) == len(row["action"]) == len(row["request_id"]) == MAX_TEXT


async def test_a_row_the_database_refuses_goes_to_the_dead_letter_file(tmp_path: Path) -> None:
    sink = Sink()
    dead = tmp_path / "dead.jsonl"
    log = AuditLog(opener(sink), flush_seconds=0.01, dead_letter=dead)
    for name in ("a", "bad", "b"):
        log.record(AuditEvent(event="tool_call", outcome="ok", tool=name))
    await log.close()
    assert tools(sink) == ["a", "b"]
    (line,) = dead.read_bytes().splitlines()
    buried = orjson.loads(line)
    assert buried["row"]["tool"] == "bad"
    assert buried["error"].startswith("ValueError")


async def test_a_flood_of_refusals_is_one_row_and_a_count_per_source_and_minute() -> None:
    from appdeck.auth.refusals import RefusalCounter

    now = [6000.0]
    sink = Sink()
    log = AuditLog(opener(sink), flush_seconds=0.01, refusals=RefusalCounter(clock=lambda: now[0]))
    for _ in range(5000):
        log.refused(None, 401, "The access token is invalid", "POST", source="10.1.2.3")
    log.refused(ALICE, 429, "rate limited", "POST", source="10.9.9.9")
    await log.flush()
    assert [(r["status"], r["detail"]) for r in sink.rows] == [
        (401, {"reason": "The access token is invalid", "source": "10.1.2.3"}),
        (429, {"reason": "rate limited", "source": "10.9.9.9"}),
    ]
    now[0] += 60  # the minute is over: its counts are written with the next flush
    await log.flush()
    assert len(sink.rows) == 3
    assert sink.rows[2]["detail"]["count"] == 4999
    assert sink.rows[2]["detail"]["source"] == "10.1.2.3"
    await log.close()
