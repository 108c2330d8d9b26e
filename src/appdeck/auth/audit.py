"""The audit log: every tools/call, every refusal, every token issued or revoked.

Records are queued in memory and written in batches by a background flusher (off the request
path); :meth:`AuditLog.close` writes what is left. Secrets never go in: callers pass names,
ids and outcomes, and :func:`scrub` drops any detail key that looks like a credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

log = logging.getLogger("appdeck.audit")

SECRET_WORDS: Final = ("token", "secret", "password", "authorization", "code", "verifier", "key")
MAX_QUEUE: Final = 100_000


class AuditSink(Protocol):
    async def append(self, rows: list[dict[str, Any]]) -> None: ...


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


def as_row(event: AuditEvent) -> dict[str, Any]:
    # by hand: dataclasses.asdict deep-copies and costs ~12 µs, on every tools/call
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


class AuditLog:
    def __init__(self, sink: AuditSink, *, flush_seconds: float = 0.25, batch: int = 500) -> None:
        self._sink = sink
        self._queue: deque[dict[str, Any]] = deque()
        self._flush_seconds = flush_seconds
        self._batch = batch
        self._wake = asyncio.Event()
        self._stopping = False
        self._writing = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="audit-flusher")

    def record(self, event: AuditEvent) -> None:
        self.record_row(as_row(event))

    def record_row(self, row: dict[str, Any]) -> None:
        """Queue a row built by the caller (every column of ``audit_log``, no secrets)."""
        if len(self._queue) >= MAX_QUEUE:
            self.dropped += 1  # the database is far behind; say so in the server log
            log.error("audit queue full; dropping a record (%s)", row.get("event"))
            return
        self._queue.append(row)
        if len(self._queue) >= self._batch:
            self._wake.set()

    async def flush(self) -> None:
        """Write what is queued; returns once every record queued before the call is written
        (waiting for a write already under way)."""
        async with self._writing:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        while self._queue:
            rows = [self._queue.popleft() for _ in range(min(self._batch, len(self._queue)))]
            try:
                await self._sink.append(rows)
            except Exception:
                log.exception("audit write failed; will retry")
                self._queue.extendleft(reversed(rows))
                return

    async def _run(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._flush_seconds):
                    await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def close(self) -> None:
        """Stop the flusher between writes (never cancel a write half-way: that would leave
        a transaction open on a pooled connection), then write what is left."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            try:
                async with asyncio.timeout(30):
                    await self._task
            except TimeoutError:
                self._task.cancel()
        await self.flush()
