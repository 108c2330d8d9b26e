"""The audit log: every tools/call, every refusal, every token issued or revoked.

:class:`AuditLog` is the protocol core's :class:`~appdeck.protocol.ports.AuditTrail`. Recording
costs the request a dict and a deque append, nothing more: a writer thread of its own, with
its own event loop and its own database connection (``open_sink``), takes the rows in batches
and writes them, so neither the event loop nor a request ever waits for the database.

- **Bounded.** At most ``max_queue`` rows wait; past that a row is dropped, counted in
  :attr:`AuditLog.dropped` and logged (the database is far behind or down).
- **Batched.** The writer wakes every ``flush_seconds`` or when ``batch`` rows wait (so on a
  busy server, about every ``flush_seconds``: each wake hands the GIL between the loop's
  thread and the writer's, which costs far more than SQLite when they run on two cores).
- **One bad row never poisons a batch.** A failed batch is written again row by row; a row that
  still fails while the database answers (``sink.ping()``) fails for a reason of its own: it
  is dropped and logged, never retried. When the database does not answer, the whole batch
  waits for it (retried with a growing pause, up to ``MAX_BACKOFF``).
- **Bounded values.** Every value is fitted to its column before it is queued
  (:func:`bounded`): integers outside a signed 64-bit range (32-bit for ``status``) become
  null, strings are cut at ``MAX_TEXT`` characters, detail strings at ``MAX_DETAIL_TEXT``, so
  a request cannot make a row unwritable.
- **Dead letters.** A row the database refuses for a reason of its own is appended (one JSON
  line) to the ``dead_letter`` file when one is given, never retried.
- **Refusals aggregated.** ``refused`` rows go through a
  :class:`~appdeck.auth.refusals.RefusalCounter`: per minute and per (source, status, reason)
  the first is written, the rest become one row with ``detail.count`` when the minute is over.
- **Shutdown flushes.** :meth:`AuditLog.close` writes what is queued (for at most
  ``close_timeout`` seconds when the database is down) and closes the writer's connection.

**Durability, as it stands** (issue 26 §1 looked at it and left it so): a row is in this
process's memory from the call until its batch commits, normally within ``flush_seconds``
(0.25 s) or ``batch`` (4,096) rows. A clean stop writes every queued row; a crash of the process
(SIGKILL, OOM, power) loses the rows not yet committed, at most that window's worth while the
database keeps up. A row is also lost when the queue is full (``max_queue``: the database down
or far behind for long) or when the database refuses it for a reason of its own (dead letter,
when configured). Each such loss is counted and logged; none is silent.

Secrets never go in: callers pass names, ids and outcomes, and :func:`scrub` drops any detail
key that looks like a credential.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from appdeck.auth.refusals import RefusalCounter
from appdeck.common.identity import Principal

log = logging.getLogger("appdeck.audit")

SECRET_WORDS: Final = ("token", "secret", "password", "authorization", "code", "verifier", "key")
MAX_QUEUE: Final = 100_000
BATCH: Final = 4096
"""Rows that wake the writer before ``flush_seconds`` is up. It was 500: a busy server woke it
every ~30 ms, and with the two threads on two cores the audit cost ~35 µs a call, most of it
in the loop's thread (the threads handing the GIL to each other at each wake); with 4,096,
~19 µs (``bench/callpath_parts.py`` unpinned, in memory). On one core: the same either way."""
MAX_TEXT: Final = 256
"""The longest string kept in a text column (names, ids, outcomes)."""
MAX_DETAIL_TEXT: Final = 1000
INT64: Final = (-(2**63), 2**63 - 1)
INT32: Final = (-(2**31), 2**31 - 1)
_TEXT_COLUMNS: Final = (
    "tenant_id", "user_id", "client_id", "event", "method", "tool", "action", "outcome",
    "request_id",
)  # fmt: skip
MAX_BACKOFF: Final = 5.0
"""The longest pause between two tries while the database does not answer."""

Row = dict[str, Any]


class AuditSink(Protocol):
    """Where rows are written (``storage.audit.AuditStore``)."""

    async def append(self, rows: list[Row]) -> None: ...


class WriterSink(AuditSink, Protocol):
    """The writer thread's own sink: it can tell an outage from a bad row, and be closed."""

    async def ping(self) -> None:
        """Return when the database answers; raise when it does not."""
        ...

    async def close(self) -> None: ...


SinkOpener = Callable[[], Awaitable[WriterSink]]
"""Opens the writer's sink on the writer thread's own event loop (its own connection)."""


@dataclass(slots=True)
class AuditEvent:
    event: str  # tool_call | refused | token_issued | token_revoked | session_dropped | ...
    outcome: str  # ok | error | denied
    tenant_id: str | None = None
    user_id: str | None = None
    client_id: str | None = None
    method: str | None = None
    tool: str | None = None
    action: str | None = None
    app_id: int | None = None
    status: int | None = None
    duration_ms: float | None = None
    request_id: str | None = None
    detail: dict[str, Any] | None = None
    ts: float = field(default_factory=time.time)


def scrub(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    if not detail:
        return None
    return {
        k: v
        for k, v in detail.items()
        if not any(word in k.lower() for word in SECRET_WORDS) or k in ("token_type", "grant_type")
    }


def as_row(event: AuditEvent) -> Row:
    # by hand: dataclasses.asdict deep-copies and costs ~12 µs
    return {
        "ts": event.ts,
        "tenant_id": event.tenant_id,
        "user_id": event.user_id,
        "client_id": event.client_id,
        "event": event.event,
        "method": event.method,
        "tool": event.tool,
        "action": event.action,
        "app_id": event.app_id,
        "outcome": event.outcome,
        "status": event.status,
        "duration_ms": event.duration_ms,
        "request_id": event.request_id,
        "detail": scrub(event.detail),
    }


_TASK_DETAIL: Final = {"task": True}


def _int(value: Any, bounds: tuple[int, int]) -> int | None:
    if type(value) is not int:  # bool, float, str...: not what the column holds
        return int(value) if isinstance(value, int) and bounds[0] <= value <= bounds[1] else None
    return value if bounds[0] <= value <= bounds[1] else None


def _text(value: Any, limit: int = MAX_TEXT) -> str | None:
    if value is None:
        return None
    text = value if type(value) is str else str(value)
    return text[:limit] if len(text) > limit else text


def _float(value: Any) -> float | None:
    if type(value) is float and math.isfinite(value):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def bounded(row: Row) -> Row:
    """``row`` with every value fitted to its ``audit_log`` column (see the module)."""
    out: Row = {name: _text(row.get(name)) for name in _TEXT_COLUMNS}
    out["event"] = out["event"] or "unknown"
    out["outcome"] = out["outcome"] or "unknown"
    out["ts"] = _float(row.get("ts")) or time.time()
    out["app_id"] = _int(row.get("app_id"), INT64)
    out["status"] = _int(row.get("status"), INT32)
    out["duration_ms"] = _float(row.get("duration_ms"))
    detail = row.get("detail")
    out["detail"] = _bounded_detail(detail) if isinstance(detail, dict) else None
    return out


def _bounded_detail(detail: dict[str, Any]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for key, value in list(detail.items())[:50]:
        name = _text(key, MAX_TEXT) or ""
        if value is None or type(value) in (bool, float):
            out[name] = value if type(value) is not float or math.isfinite(value) else None
        elif type(value) is int:
            out[name] = value if INT64[0] <= value <= INT64[1] else str(value)[:40]
        elif type(value) is str:
            out[name] = _text(value, MAX_DETAIL_TEXT)
        else:  # lists, nested dicts: kept as bounded text
            out[name] = _text(orjson.dumps(value, default=str).decode(), MAX_DETAIL_TEXT)
    return out or None


class AuditLog:
    """Queues audit rows on the request path; a writer thread writes them."""

    def __init__(
        self,
        open_sink: SinkOpener,
        *,
        flush_seconds: float = 0.25,
        batch: int = BATCH,
        max_queue: int = MAX_QUEUE,
        close_timeout: float = 10.0,
        dead_letter: Path | None = None,
        refusals: RefusalCounter | None = None,
    ) -> None:
        self._open_sink = open_sink
        self.refusals = refusals if refusals is not None else RefusalCounter()
        self._counts_lock = threading.Lock()  # count rows are queued by one thread at a time
        self._flush_seconds = flush_seconds
        self._batch = batch
        self._max_queue = max_queue
        self._close_timeout = close_timeout
        self._dead_letter = dead_letter
        # rows, and flush markers (a Future set once every row before it is written)
        self._queue: deque[Row | concurrent.futures.Future[None]] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._deadline: float | None = None
        """Set by close(): past it, the writer stops waiting for a database that is down."""
        self.dropped = 0
        """Rows given up: the queue was full, or the row itself could not be written."""

    # -- the request side -------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="audit-writer", daemon=True)
            self._thread.start()

    def record(self, event: AuditEvent) -> None:
        self.record_row(as_row(event))

    def record_row(self, row: Row) -> None:
        """Queue a row built by the caller (every column of ``audit_log``, no secrets); each
        value is fitted to its column first (:func:`bounded`); a refusal may only be counted
        (:class:`~appdeck.auth.refusals.RefusalCounter`)."""
        fitted = bounded(row)
        if fitted["event"] == "refused" and not self.refusals.admit(fitted):
            return
        self._queue_row(fitted)

    def _queue_row(self, row: Row) -> None:
        queue = self._queue
        if len(queue) >= self._max_queue:
            self.dropped += 1
            log.error("audit queue full; dropping a record (%s)", row.get("event"))
            return
        queue.append(row)
        if len(queue) == self._batch:  # on crossing only: Event.set() takes a lock
            self._wake.set()

    def tool_called(
        self,
        principal: Principal | None,
        tool: str | None,
        action: str | None,
        app_id: int | None,
        failed: bool,
        status: int,
        duration_ms: float,
        request_id: str,
        task: bool,
    ) -> None:
        """One tools/call (the core's AuditTrail); built by hand, it runs on every call: the
        values a caller chose (tool, action, app_id, request id) are bounded here, cheaply."""
        if tool is not None and len(tool) > MAX_TEXT:
            tool = tool[:MAX_TEXT]
        if action is not None and len(action) > MAX_TEXT:
            action = action[:MAX_TEXT]
        if app_id is not None and not INT64[0] <= app_id <= INT64[1]:
            app_id = None
        if len(request_id) > MAX_TEXT:
            request_id = request_id[:MAX_TEXT]
        self._queue_row(
            {
                "ts": time.time(),
                "tenant_id": principal.tenant if principal else None,
                "user_id": principal.user if principal else None,
                "client_id": principal.client_id if principal else None,
                "event": "tool_call",
                "method": "tools/call",
                "tool": tool,
                "action": action,
                "app_id": app_id,
                "outcome": "error" if failed else "ok",
                "status": status,
                "duration_ms": duration_ms,
                "request_id": request_id,
                "detail": _TASK_DETAIL if task else None,
            }
        )

    def refused(
        self,
        principal: Principal | None,
        status: int,
        reason: str,
        method: str | None = None,
        tool: str | None = None,
        *,
        source: str | None = None,
    ) -> None:
        """One refusal: 401, 403 or 429 (the core's AuditTrail, and the transport's guard);
        ``source`` is the client's IP, when known. Aggregated per minute (see the module)."""
        detail: dict[str, Any] = {"reason": reason[:300]}
        if source is not None:
            detail["source"] = source
        self.record(
            AuditEvent(
                event="refused",
                outcome="denied",
                tenant_id=principal.tenant if principal else None,
                user_id=principal.user if principal else None,
                client_id=principal.client_id if principal else None,
                method=method,
                tool=tool,
                status=status,
                detail=detail,
            )
        )

    async def flush(self) -> None:
        """Return once every row queued before the call is written (or given up); waits at
        most ``close_timeout`` seconds. Counts of refusals of minutes that are over go too."""
        self.start()
        self._queue_counts()
        marker: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._queue.append(marker)
        self._wake.set()
        try:
            async with asyncio.timeout(self._close_timeout):
                await asyncio.wrap_future(marker)
        except TimeoutError:
            log.error("audit flush timed out; %d record(s) still queued", self.pending)

    @property
    def pending(self) -> int:
        return sum(1 for item in self._queue if type(item) is dict)

    async def close(self) -> None:
        """Write what is queued (bounded by ``close_timeout`` when the database is down), then
        stop the writer and close its connection. Records made after this are not written."""
        self._deadline = time.monotonic() + self._close_timeout
        self._queue_counts(everything=True)
        await self.flush()
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, self._close_timeout)
            lost = self.pending
            if lost:
                self.dropped += lost
                log.error("audit log closed with %d record(s) unwritten", lost)

    # -- the writer thread ------------------------------------------------------------------

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._write_forever())
        except Exception:
            log.exception("the audit writer stopped")
        finally:
            loop.close()

    async def _write_forever(self) -> None:
        sink = await self._open()
        if sink is None:
            return
        try:
            while True:
                self._wake.wait(self._flush_seconds)
                self._wake.clear()
                self._queue_counts()
                await self._drain(sink)
                if self._stopping and (not self._queue or self._past_deadline()):
                    return
        finally:
            await sink.close()

    async def _open(self) -> WriterSink | None:
        pause = self._flush_seconds
        while True:
            try:
                return await self._open_sink()
            except Exception:
                log.exception("audit: cannot open the database; will retry")
            if self._past_deadline():
                return None
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_BACKOFF)

    def _queue_counts(self, *, everything: bool = False) -> None:
        """Queue the count rows of the refusals of minutes that are over (whichever thread
        takes them, they are queued before this returns: flush() relies on it)."""
        with self._counts_lock:
            for row in self.refusals.due(everything=everything):
                self._queue_row(row)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _take(self, limit: int) -> tuple[list[Row], list[concurrent.futures.Future[None]]]:
        """Up to ``limit`` items from the front of the queue: the rows, and the flush markers
        among them (set once the rows before them are written)."""
        rows: list[Row] = []
        markers: list[concurrent.futures.Future[None]] = []
        queue = self._queue
        for _ in range(min(limit, len(queue))):
            item = queue.popleft()
            if type(item) is dict:
                rows.append(item)
            else:
                assert isinstance(item, concurrent.futures.Future)
                markers.append(item)
        return rows, markers

    async def _drain(self, sink: WriterSink) -> None:
        """Write what was queued when the writer woke, in batches; what comes meanwhile waits
        for the next wake (so a busy server writes full batches, not a trickle of small ones)."""
        pause = self._flush_seconds
        budget = len(self._queue)
        while budget > 0:
            rows, markers = self._take(min(self._batch, budget))
            budget -= len(rows) + len(markers)
            left = await self._write(sink, rows) if rows else rows
            if left:  # the database does not answer: put the rows back and wait for it
                self._queue.extendleft(reversed([*left, *markers]))
                budget += len(left) + len(markers)
                if self._past_deadline():
                    return  # closing, and the database stayed away: close() counts the loss
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_BACKOFF)
                continue
            for marker in markers:
                if not marker.done():
                    marker.set_result(None)

    async def _write(self, sink: WriterSink, rows: list[Row]) -> list[Row]:
        """Write ``rows``; returns those to try again later (the database does not answer)."""
        try:
            await sink.append(rows)
            return []
        except Exception as exc:  # noqa: BLE001 - judged below, row by row and by ping()
            error: BaseException = exc
        failed = 0
        for index, row in enumerate(rows):
            try:
                await sink.append([row])
            except Exception as exc:  # noqa: BLE001 - an outage when ping() fails, else the row
                error = exc
                if not await self._answers(sink):
                    return rows[index:]  # an outage, not a bad row
                failed += 1
                self.dropped += 1
                self._bury(row, exc)
        if failed:
            log.error(
                "audit: %d record(s) could not be written and were %s (%s: %s)",
                failed,
                f"put in {self._dead_letter}" if self._dead_letter else "dropped",
                type(error).__name__,
                str(error)[:200],
            )
        return []

    def _bury(self, row: Row, error: BaseException) -> None:
        """Append a row the database refused to the dead-letter file (one JSON line)."""
        if self._dead_letter is None:
            return
        line = {"row": row, "error": f"{type(error).__name__}: {str(error)[:200]}"}
        try:
            with self._dead_letter.open("ab") as out:
                out.write(orjson.dumps(line, default=str) + b"\n")
        except OSError:
            log.exception("audit: cannot write the dead-letter file %s", self._dead_letter)

    @staticmethod
    async def _answers(sink: WriterSink) -> bool:
        try:
            await sink.ping()
        except Exception:
            log.warning("audit: the database does not answer; will retry", exc_info=True)
            return False
        return True
