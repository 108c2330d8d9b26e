"""Tasks (MCP 2025-11-25): long-running requests the client polls or watches.

State machine (this module owns it; every change is persisted before it is announced):

    working ──────▶ completed | failed | cancelled
       ▲  │
       │  ▼
    input_required ─▶ completed | failed | cancelled

``completed``, ``failed`` and ``cancelled`` are terminal. A task whose process died while it was
``working`` is reconciled at the next start: resumed by its method's resumer when one is
registered, else failed with a status message that says why. No task stays working forever.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from appdeck.common.identity import Principal
from appdeck.protocol import jsonrpc
from appdeck.protocol.errors import InvalidParams, McpError, error_response
from appdeck.protocol.pagination import decode, encode
from appdeck.protocol.ports import Outbox, TaskStore

WORKING: Final = "working"
INPUT_REQUIRED: Final = "input_required"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"

TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    WORKING: frozenset({INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED}),
    INPUT_REQUIRED: frozenset({WORKING, COMPLETED, FAILED, CANCELLED}),
    COMPLETED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}
TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELLED})

RELATED_TASK_META: Final = "io.modelcontextprotocol/related-task"

log = logging.getLogger("appdeck.tasks")


class IllegalTransition(RuntimeError):
    """A programming error: a move the state table does not allow."""


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class Task:
    """A task and the request it runs. ``result`` or ``error`` is set once it is terminal."""

    task_id: str
    tenant: str
    user: str
    session_id: str
    status: str
    created_at: float
    updated_at: float
    ttl_ms: int | None
    poll_interval_ms: int
    method: str
    params: dict[str, Any]
    instance_id: str
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    progress_token: str | int | None = field(default=None)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def wire(self) -> dict[str, Any]:
        """The Task object of the spec."""
        body: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": _iso(self.created_at),
            "lastUpdatedAt": _iso(self.updated_at),
            "ttl": self.ttl_ms,
            "pollInterval": self.poll_interval_ms,
        }
        if self.status_message is not None:
            body["statusMessage"] = self.status_message
        return body


Runner = Callable[[Task], Awaitable[dict[str, Any]]]
"""Runs a task's request; returns its result, or raises :class:`McpError` for an error."""

Resumer = Callable[[Task], Awaitable[bool]]
"""Given a task a dead process left working, take it over (True) or decline (False)."""


@dataclass(frozen=True, slots=True)
class TaskLimits:
    default_ttl_ms: int = 3_600_000
    max_ttl_ms: int = 86_400_000
    default_poll_ms: int = 1_000
    min_poll_ms: int = 250
    max_poll_ms: int = 60_000
    page_size: int = 50


class TaskManager:
    """Creates, runs, reports and cancels tasks."""

    def __init__(
        self,
        store: TaskStore,
        outbox: Outbox,
        *,
        instance_id: str,
        limits: TaskLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._outbox = outbox
        self._instance = instance_id
        self._limits = limits or TaskLimits()
        self._clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}
        self._live: dict[str, Task] = {}
        self._finished: dict[str, asyncio.Event] = {}
        self._stopping = False

    # -- creation and running -------------------------------------------------------------

    def _ttl(self, requested: object) -> int:
        lim = self._limits
        if requested is None:
            return lim.default_ttl_ms
        if not isinstance(requested, int) or isinstance(requested, bool) or requested < 0:
            raise InvalidParams("task.ttl must be a non-negative integer (milliseconds)")
        return min(requested, lim.max_ttl_ms)

    def _poll(self, requested: object) -> int:
        lim = self._limits
        if requested is None:
            return lim.default_poll_ms
        if not isinstance(requested, int) or isinstance(requested, bool) or requested < 0:
            raise InvalidParams("task.pollInterval must be a non-negative integer (milliseconds)")
        return max(lim.min_poll_ms, min(requested, lim.max_poll_ms))

    async def start(
        self,
        principal: Principal,
        session_id: str,
        method: str,
        params: dict[str, Any],
        task_request: dict[str, Any],
        runner: Runner,
        progress_token: str | int | None = None,
    ) -> Task:
        now = self._clock()
        task = Task(
            task_id=secrets.token_urlsafe(16),
            tenant=principal.tenant,
            user=principal.user,
            session_id=session_id,
            status=WORKING,
            created_at=now,
            updated_at=now,
            ttl_ms=self._ttl(task_request.get("ttl")),
            poll_interval_ms=self._poll(task_request.get("pollInterval")),
            method=method,
            params=params,
            instance_id=self._instance,
            progress_token=progress_token,
        )
        await self._store.insert(task)
        self.launch(task, runner)
        return task

    def launch(self, task: Task, runner: Runner) -> None:
        """Run ``task`` in the background on this process."""
        self._finished[task.task_id] = asyncio.Event()
        self._live[task.task_id] = task
        self._running[task.task_id] = asyncio.create_task(
            self._run(task, runner), name=f"task:{task.task_id}"
        )

    async def _run(self, task: Task, runner: Runner) -> None:
        try:
            result = await runner(task)
        except asyncio.CancelledError:
            if not task.terminal and not self._stopping:
                await self._finish(task, CANCELLED, "The task was cancelled.")
            raise
        except McpError as exc:
            task.error = exc.to_error()
            await self._finish(task, FAILED, exc.message)
        except Exception:  # the runner is ours; a defect must still end the task
            log.exception("task %s failed", task.task_id)
            task.error = error_response(None, RuntimeError())["error"]
            await self._finish(task, FAILED, "The task failed with an internal error.")
        else:
            task.result = result
            failed = bool(result.get("isError"))
            await self._finish(task, FAILED if failed else COMPLETED, _summary(result, failed))
        finally:
            self._running.pop(task.task_id, None)
            self._live.pop(task.task_id, None)
            event = self._finished.pop(task.task_id, None)
            if event is not None:
                event.set()

    async def _finish(self, task: Task, status: str, message: str | None) -> None:
        if task.terminal:
            return
        await self.transition(task, status, message)

    async def transition(self, task: Task, status: str, message: str | None = None) -> None:
        """Move ``task`` to ``status`` (checked against the table), persist, then announce."""
        if status not in TRANSITIONS[task.status]:
            raise IllegalTransition(f"task {task.task_id}: {task.status} -> {status}")
        task.status = status
        task.status_message = message
        task.updated_at = self._clock()
        await self._store.update(task)
        await self._outbox.to_session(
            task.session_id, jsonrpc.notification("notifications/tasks/status", task.wire())
        )

    async def note(self, task: Task, message: str) -> None:
        """Change the status message of a running task (persisted, then announced)."""
        if task.terminal:
            return
        task.status_message = message[:500]
        task.updated_at = self._clock()
        await self._store.update(task)
        await self._outbox.to_session(
            task.session_id, jsonrpc.notification("notifications/tasks/status", task.wire())
        )

    # -- queries --------------------------------------------------------------------------

    async def get(self, principal: Principal, task_id: object) -> Task:
        """The caller's task; another owner's task is as unknown as a made-up id."""
        if not isinstance(task_id, str) or not task_id or len(task_id) > 128:
            raise InvalidParams("taskId must be a non-empty string")
        task = await self._store.get(task_id)
        if task is None or (task.tenant, task.user) != principal.owner or self._expired(task):
            raise InvalidParams("Task not found", {"taskId": task_id})
        return task

    def _expired(self, task: Task) -> bool:
        return task.ttl_ms is not None and self._clock() > task.created_at + task.ttl_ms / 1000

    async def wait(self, principal: Principal, task_id: object) -> Task:
        """Block until the task is terminal (tasks/result), polling the store when it runs
        on another process."""
        task = await self.get(principal, task_id)
        while not task.terminal:
            event = self._finished.get(task.task_id)
            if event is not None:
                await event.wait()
            else:
                await asyncio.sleep(task.poll_interval_ms / 1000)
            task = await self.get(principal, task.task_id)
        return task

    async def list(self, principal: Principal, cursor: object) -> tuple[list[Task], str | None]:
        offset = decode(cursor)
        size = self._limits.page_size
        rows = await self._store.list_for_owner(principal.tenant, principal.user, offset, size + 1)
        tasks = [t for t in rows[:size] if not self._expired(t)]
        return tasks, (encode(offset + size) if len(rows) > size else None)

    async def cancel(self, principal: Principal, task_id: object) -> Task:
        task = await self.get(principal, task_id)
        if task.terminal:
            raise InvalidParams(
                f"Cannot cancel task: already in terminal status '{task.status}'",
                {"taskId": task.task_id},
            )
        running = self._running.get(task.task_id)
        live = self._live.get(task.task_id, task)
        await self.transition(live, CANCELLED, "The task was cancelled by request.")
        if running is not None:
            running.cancel()
        return live

    # -- lifetime -------------------------------------------------------------------------

    async def reconcile(self, resumers: Mapping[str, Resumer]) -> int:
        """End or resume every task a dead process left working. Returns how many."""
        count = 0
        for task in await self._store.working_elsewhere(self._instance):
            resumer = resumers.get(task.method)
            if resumer is not None and await resumer(task):
                count += 1
                continue
            task.error = {"code": -32603, "message": "interrupted by a server restart"}
            await self.transition(
                task, FAILED, "The server restarted while this task was running; run it again."
            )
            count += 1
        return count

    async def expire(self) -> int:
        return await self._store.delete_expired(self._clock())

    async def shutdown(self) -> None:
        """Stop what runs here. The tasks stay ``working`` in the store, so the next start
        reconciles them (resumed, or failed with a clear message), exactly as after a crash."""
        self._stopping = True
        for running in list(self._running.values()):
            running.cancel()
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=5)


def _summary(result: dict[str, Any], failed: bool) -> str:
    if not failed:
        return "The task completed."
    for item in result.get("content") or ():
        if isinstance(item, dict) and item.get("type") == "text":
            return str(item.get("text", ""))[:500]
    return "The task failed."
