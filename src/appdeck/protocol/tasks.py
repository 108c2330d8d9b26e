"""Tasks (MCP 2025-11-25): long-running requests the client polls or watches.

State machine (this module owns it; every change is persisted before it is announced):

    working ──────▶ completed | failed | cancelled
       ▲  │
       │  ▼
    input_required ─▶ completed | failed | cancelled

``completed``, ``failed`` and ``cancelled`` are terminal. A task whose process died while it was
``working`` is swept (by any live replica, or at the next start): resumed by its method's
resumer when one is registered, else failed with a status message that says why. No task
stays working forever. Every status write is a compare-and-set in the store: nothing
overwrites a terminal status, whichever replica wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from appdeck.common.identity import Principal
from appdeck.common.unwinding import to_the_end
from appdeck.protocol import jsonrpc
from appdeck.protocol.errors import InvalidParams, McpError, ServerBusy, error_response
from appdeck.protocol.pagination import decode, encode
from appdeck.protocol.ports import Broadcast, Outbox, Subscription, TaskStore
from appdeck.protocol.task_model import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    MAX_TASK_ID,
    TERMINAL,
    WORKING,
    Resumer,
    Runner,
    Task,
    TaskLimits,
    cancel_channel,
    done_channel,
    task_id_of,
)

TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    WORKING: frozenset({INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED}),
    INPUT_REQUIRED: frozenset({WORKING, COMPLETED, FAILED, CANCELLED}),
    COMPLETED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}
MAX_CHORES: Final = 1_000
"""Rechecks a flood of ``task-cancel`` messages may schedule at once (beyond: one recheck)."""
ORPHAN_MESSAGE: Final = (
    "The server running this task stopped or restarted before it finished; run it again."
)

log = logging.getLogger("appdeck.tasks")


class IllegalTransition(RuntimeError):
    """A programming error: a move the state table does not allow."""


class _Doorbell:
    """The waiters of one task's ``tasks/result`` in this process, and the broadcast
    subscription that rings them when another process ends the task."""

    __slots__ = ("events", "subscription")

    def __init__(self) -> None:
        self.events: set[asyncio.Event] = set()
        self.subscription: Subscription | None = None

    def ring(self, _payload: bytes = b"") -> None:
        """A doorbell only: whatever the payload, the waiters re-read the store."""
        for event in self.events:
            event.set()


class TaskManager:
    """Creates, runs, reports and cancels tasks.

    Several replicas may share one store. The task belongs to the instance that runs it; any
    replica reads it (tasks/get, tasks/list, tasks/result) and cancels it: the cancel is a
    compare-and-set in the store, then a ``task-cancel:<owner>`` message so the owner stops
    its run at once. The owner also re-reads its running tasks every
    :attr:`TaskLimits.recheck_seconds` (the message is at most once), and every replica
    sweeps the tasks of dead replicas (:meth:`sweep`).
    """

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
        self._ending: set[str] = set()  # runs past their runner, writing their end
        self._adopting: set[str] = set()  # being inserted or claimed, not launched yet
        self._doorbells: dict[str, _Doorbell] = {}
        self._chores: set[asyncio.Task[Any]] = set()  # work scheduled by broadcast handlers
        self._wake = asyncio.Event()  # re-read the running tasks now (a reconnect)
        self._broadcast: Broadcast | None = None
        self._subscription: Subscription | None = None
        self._stopping = False
        self._watchers: list[Callable[[Task], Awaitable[None]]] = []

    def on_change(self, watcher: Callable[[Task], Awaitable[None]]) -> None:
        """Await ``watcher(task)`` after every persisted change of a task this process wrote
        (status, status message, end), in the order of the changes: how
        ``notifications/tasks`` reach ``subscriptions/listen`` (another replica's changes are
        its own watchers' business). A watcher's failure is logged, never the task's."""
        self._watchers.append(watcher)

    @property
    def instance_id(self) -> str:
        return self._instance

    @property
    def store(self) -> TaskStore:
        """The shared store: the tasks extension keeps a task's input requests in it."""
        return self._store

    async def attach(self, broadcast: Broadcast) -> None:
        """Join the other replicas: hear the cancels of the tasks this instance runs, ring
        ``task-done`` for the others' waiters, re-read the truth after a reconnect."""
        if self._subscription is not None:
            return
        self._broadcast = broadcast
        self._subscription = await broadcast.subscribe(
            cancel_channel(self._instance), self._on_cancel
        )
        broadcast.on_reconnect(self._wake.set)

    async def detach(self) -> None:
        if self._broadcast is not None and self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._broadcast.unsubscribe(self._subscription)
        self._subscription = None

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
        if len(self._running) + len(self._adopting) >= self._limits.max_running:
            raise ServerBusy("Too many tasks are running on this server; try again later.")
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
        self._adopting.add(task.task_id)  # a sweep between insert and launch must skip it
        try:
            await self._store.insert(task)
            self.launch(task, runner)
        finally:
            self._adopting.discard(task.task_id)
        return task

    def launch(self, task: Task, runner: Runner) -> None:
        """Run ``task`` in the background on this process (its ``instance_id`` is this
        process's: :meth:`start`, or a resumer after the sweep claimed it)."""
        self._live[task.task_id] = task
        self._running[task.task_id] = asyncio.create_task(
            self._run(task, runner), name=f"task:{task.task_id}"
        )

    async def _run(self, task: Task, runner: Runner) -> None:
        task_id = task.task_id
        try:
            result = await runner(task)
        except asyncio.CancelledError:
            self._ending.add(task_id)
            if not task.terminal and not self._stopping:
                await to_the_end(self._finish(task, CANCELLED, "The task was cancelled."))
            raise
        except McpError as exc:
            self._ending.add(task_id)
            task.error = exc.to_error()
            await self._finish(task, FAILED, exc.message)
        except Exception:  # the runner is ours; a defect must still end the task
            self._ending.add(task_id)
            log.exception("task %s failed", task_id)
            task.error = error_response(None, RuntimeError())["error"]
            await self._finish(task, FAILED, "The task failed with an internal error.")
        else:
            self._ending.add(task_id)
            task.result = result
            # 2025-11-25 ends a tool error as failed; the tasks extension keeps failed for
            # protocol errors and reports a tool error as a completed task with isError
            failed = bool(result.get("isError")) and not task.stateless
            await self._finish(task, FAILED if failed else COMPLETED, _summary(result, failed))
        finally:
            self._running.pop(task_id, None)
            self._live.pop(task_id, None)
            self._ending.discard(task_id)
            self._ring(task_id)

    async def _finish(self, task: Task, status: str, message: str | None) -> None:
        """The run's end. Refused when another process ended the task first (a cancel, or a
        sweep that took this process for dead): the stored end stands."""
        if task.terminal:
            return
        await self._write(task, status, message)

    async def transition(self, task: Task, status: str, message: str | None = None) -> bool:
        """Move ``task`` to ``status`` (checked against the table), persist (compare-and-set),
        then announce. False: another process ended or took the task first; ``task`` now
        holds the stored state and its run here is stopped."""
        if status not in TRANSITIONS[task.status]:
            raise IllegalTransition(f"task {task.task_id}: {task.status} -> {status}")
        if await self._write(task, status, message):
            return True
        self._stop_here(task.task_id)
        return False

    async def note(self, task: Task, message: str) -> None:
        """Change the status message of a running task (persisted, then announced)."""
        if task.terminal:
            return
        if not await self._write(task, task.status, message[:500]):
            self._stop_here(task.task_id)

    async def _write(self, task: Task, status: str, message: str | None) -> bool:
        """Compare-and-set ``task`` to ``status`` in the store; on success update ``task``,
        announce on its session and, when it ended, ring its waiters everywhere. On refusal
        load the stored state into ``task`` and return False."""
        changed = replace(task, status=status, status_message=message, updated_at=self._clock())
        if not await self._store.update(changed) and not await self._reload(task):
            return False
        task.status, task.status_message = changed.status, changed.status_message
        task.updated_at = changed.updated_at
        if not task.stateless:
            await self._outbox.to_session(
                task.session_id, jsonrpc.notification("notifications/tasks/status", task.wire())
            )
        for watcher in self._watchers:
            try:
                await watcher(task)
            except Exception:  # an observer's defect must not stop the task
                log.exception("task watcher failed")
        if task.terminal:
            self._ring(task.task_id)
            await self._publish(done_channel(task.task_id), task.status.encode())
        return True

    async def _reload(self, task: Task) -> bool:
        """After a refused write: load the stored state into ``task``. True when there is
        none (the task's ttl ran out and it was deleted): nothing to protect, the run goes
        on unstored as it always did."""
        stored = await self._store.get(task.task_id)
        if stored is None:
            return True
        task.status, task.status_message = stored.status, stored.status_message
        task.updated_at, task.instance_id = stored.updated_at, stored.instance_id
        task.result, task.error = stored.result, stored.error
        if task.terminal:
            self._ring(task.task_id)
        return False

    def _stop_here(self, task_id: str) -> None:
        """Stop this process's run of a task that ended, or moved, elsewhere."""
        running = self._running.get(task_id)
        if running is not None and task_id not in self._ending:
            running.cancel()

    # -- queries --------------------------------------------------------------------------

    async def get(self, principal: Principal, task_id: object) -> Task:
        """The caller's task; another owner's task is as unknown as a made-up id."""
        if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TASK_ID:
            raise InvalidParams("taskId must be a non-empty string")
        task = await self._store.get(task_id)
        if task is None or (task.tenant, task.user) != principal.owner or self._expired(task):
            raise InvalidParams("Task not found", {"taskId": task_id})
        return task

    def _expired(self, task: Task) -> bool:
        return task.ttl_ms is not None and self._clock() > task.created_at + task.ttl_ms / 1000

    async def wait(self, principal: Principal, task_id: object) -> Task:
        """Block until the task is terminal (tasks/result), wherever it runs: woken by its
        end here, by a ``task-done`` message from another process, or by a re-read of the
        store every poll interval (the message is at most once)."""
        task = await self.get(principal, task_id)
        if task.terminal:
            return task
        async with self.doorbell(task.task_id) as rung:
            while True:
                task = await self.get(principal, task.task_id)  # after subscribing: no gap
                if task.terminal:
                    return task
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(task.poll_interval_ms / 1000):
                        await rung.wait()
                rung.clear()

    @contextlib.asynccontextmanager
    async def doorbell(self, task_id: str) -> AsyncIterator[asyncio.Event]:
        """An event set when the task may have ended or got input (:meth:`ring`). Past
        :attr:`TaskLimits.max_watched` watched tasks, a plain event that nothing sets: the
        waiter polls."""
        event = asyncio.Event()
        bell = self._doorbells.get(task_id)
        if bell is None:
            if len(self._doorbells) >= self._limits.max_watched:
                yield event
                return
            bell = self._doorbells[task_id] = _Doorbell()
            if self._broadcast is not None:
                try:
                    bell.subscription = await self._broadcast.subscribe(
                        done_channel(task_id), bell.ring
                    )
                except Exception:  # the poll still wakes the waiter
                    log.warning("task-done subscribe failed; polling", exc_info=True)
        bell.events.add(event)
        try:
            yield event
        finally:
            bell.events.discard(event)
            if not bell.events and self._doorbells.get(task_id) is bell:
                del self._doorbells[task_id]
                if bell.subscription is not None and self._broadcast is not None:
                    with contextlib.suppress(Exception):
                        await self._broadcast.unsubscribe(bell.subscription)

    def _ring(self, task_id: str) -> None:
        bell = self._doorbells.get(task_id)
        if bell is not None:
            bell.ring()

    async def ring(self, task_id: str) -> None:
        """Wake the waiters of ``task_id`` here and on every replica (new input for it)."""
        self._ring(task_id)
        await self._publish(done_channel(task_id), b"input")

    async def list(self, principal: Principal, cursor: object) -> tuple[list[Task], str | None]:
        offset = decode(cursor)
        size = self._limits.page_size
        rows = await self._store.list_for_owner(principal.tenant, principal.user, offset, size + 1)
        tasks = [t for t in rows[:size] if not self._expired(t)]
        return tasks, (encode(offset + size) if len(rows) > size else None)

    async def cancel(self, principal: Principal, task_id: object) -> Task:
        """Cancel the task wherever it runs: compare-and-set to ``cancelled`` in the store,
        then stop the run (here, or through ``task-cancel:<owner>``)."""
        task = await self.get(principal, task_id)
        target = self._live.get(task.task_id, task)
        for _ in range(3):  # a refusal reloads target: ended (refused below) or moved
            if target.terminal:
                raise InvalidParams(
                    f"Cannot cancel task: already in terminal status '{target.status}'",
                    {"taskId": target.task_id},
                )
            if await self._write(target, CANCELLED, "The task was cancelled by request."):
                break
        else:
            raise ServerBusy("The task changed hands while it was cancelled; try again.")
        self._stop_here(target.task_id)
        if target.instance_id != self._instance:
            await self._publish(cancel_channel(target.instance_id), target.task_id.encode())
        return target

    # -- between replicas -------------------------------------------------------------------

    async def _publish(self, channel: str, payload: bytes) -> None:
        """Best effort: the store holds the truth, the backstop reads catch a lost message."""
        if self._broadcast is None:
            return
        try:
            await self._broadcast.publish(channel, payload)
        except Exception:
            log.warning("broadcast on %s failed; backstop reads catch up", channel, exc_info=True)

    def _on_cancel(self, payload: bytes) -> None:
        """A ``task-cancel`` addressed to this instance: re-read the task, stop its run."""
        task_id = task_id_of(payload)
        if task_id is None:
            size = len(payload) if isinstance(payload, bytes) else -1
            log.warning("dropped a malformed task-cancel message (%d bytes)", size)
            return
        if task_id in self._running:
            self._chore(self.recheck([task_id]))

    def _chore(self, work: Coroutine[Any, Any, Any]) -> None:
        if len(self._chores) >= MAX_CHORES:  # a flood: the next recheck reads them all
            work.close()
            self._wake.set()
            return
        chore = asyncio.create_task(work)
        self._chores.add(chore)
        chore.add_done_callback(self._chore_done)

    def _chore_done(self, chore: asyncio.Task[Any]) -> None:
        self._chores.discard(chore)
        if not chore.cancelled() and chore.exception() is not None:
            log.warning("task recheck failed", exc_info=chore.exception())

    async def recheck(self, task_ids: Sequence[str] | None = None) -> int:
        """Re-read the stored status of tasks running here (all by default) and stop the
        runs of those that ended or moved elsewhere. Returns how many were stopped."""
        ids = [i for i in (self._running if task_ids is None else task_ids) if i in self._running]
        if not ids:
            return 0
        stored = await self._store.statuses(ids)
        stopped = 0
        for task_id in ids:
            row = stored.get(task_id)
            if row is None or (row[0] not in TERMINAL and row[1] == self._instance):
                continue  # still ours (or expired and deleted: it runs on, as it always did)
            if task_id in self._running and task_id not in self._ending:
                self._stop_here(task_id)
                stopped += 1
        return stopped

    async def sweep(self, resumers: Mapping[str, Resumer] | None = None) -> int:
        """End or resume the running tasks no live process runs (their replica's heartbeat
        is stale or gone). Idempotent and safe on every replica at once: each end or claim
        is a compare-and-set. Returns how many this call ended or resumed."""
        resumers = resumers or {}
        count = 0
        for task in await self._store.orphaned(self._instance, self._limits.sweep_batch):
            task_id = task.task_id
            if task_id in self._live or task_id in self._adopting:
                continue  # runs here
            if task.instance_id == self._instance and self._stopping:
                continue  # left for the next start, as after a crash
            resumer = resumers.get(task.method)
            if resumer is not None:
                self._adopting.add(task_id)
                try:
                    if not await self._store.claim(task, self._instance):
                        continue  # another replica swept it first
                    task.instance_id = self._instance
                    if await resumer(task):
                        count += 1
                        continue
                except Exception:  # a resumer's defect must not leave the task working
                    log.exception("resuming task %s failed", task_id)
                finally:
                    self._adopting.discard(task_id)
                if task_id in self._live:
                    continue  # launched here before its resumer failed: its run ends it
            task.error = {"code": -32603, "message": "interrupted: its server stopped"}
            if await self._write(task, FAILED, ORPHAN_MESSAGE):
                count += 1
        return count

    async def watch(
        self, stopping: asyncio.Event, resumers: Mapping[str, Resumer] | None = None
    ) -> None:
        """The backstops, until ``stopping`` is set: every
        :attr:`TaskLimits.recheck_seconds` (and at once after a broadcast reconnect)
        :meth:`recheck` the tasks running here; every :attr:`TaskLimits.sweep_seconds`
        :meth:`sweep` the tasks of dead replicas."""
        loop = asyncio.get_running_loop()
        next_sweep = loop.time() + self._limits.sweep_seconds
        stop = asyncio.ensure_future(stopping.wait())
        try:
            while not stopping.is_set() and not self._stopping:
                wake = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait(
                    {stop, wake},
                    timeout=self._limits.recheck_seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                wake.cancel()
                self._wake.clear()
                if stopping.is_set() or self._stopping:
                    return
                try:
                    await self.recheck()
                    if loop.time() >= next_sweep:
                        next_sweep = loop.time() + self._limits.sweep_seconds
                        await self.sweep(resumers)
                except Exception:  # the database may be down for a while; keep watching
                    log.exception("task backstop failed")
        finally:
            stop.cancel()

    # -- lifetime -------------------------------------------------------------------------

    async def reconcile(self, resumers: Mapping[str, Resumer]) -> int:
        """At start: end or resume every task no live process runs (the tasks of live
        replicas are theirs). Returns how many."""
        total = 0
        for _ in range(100):  # bounded: each round ends or claims what it read
            done = await self.sweep(resumers)
            total += done
            if done < self._limits.sweep_batch:
                break
        return total

    async def expire(self) -> int:
        return await self._store.delete_expired(self._clock())

    async def shutdown(self) -> None:
        """Stop what runs here. The tasks stay ``working`` in the store; once this replica's
        heartbeat is removed (or stale), a live replica's sweep, or the next start, resumes
        or fails them with a clear message, exactly as after a crash."""
        self._stopping = True
        self._wake.set()
        for chore in list(self._chores):
            chore.cancel()
        for running in list(self._running.values()):
            running.cancel()
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=5)
        await self.detach()


def _summary(result: dict[str, Any], failed: bool) -> str:
    if not failed:
        return "The task completed."
    for item in result.get("content") or ():
        if isinstance(item, dict) and item.get("type") == "text":
            return str(item.get("text", ""))[:500]
    return "The task failed."
