"""Tasks in the database: every state change is written here before it is announced.

Several replicas share this table. A task belongs to the replica that runs it
(``instance_id``); every write of a task's state is a compare-and-set on "still running, still
owned by the instance the writer read", so the owner's finish never overwrites a ``cancelled``
written elsewhere, and two sweepers never both end (or resume) the same task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.protocol.ports import TaskStore
from appdeck.protocol.task_model import INPUT_REQUIRED, WORKING, Task
from appdeck.storage.replicas import DEAD_AFTER_SECONDS, live_condition
from appdeck.storage.schema import task_inputs, tasks

RUNNING: Final = (WORKING, INPUT_REQUIRED)
"""The statuses of a task some process is still responsible for."""

_FIXED: Final = frozenset({"task_id", "tenant", "user", "created_at", "instance_id"})
"""Columns :meth:`SqlTaskStore.update` leaves alone: the key, the owner, the birth time and
the instance that runs it (changed by :meth:`SqlTaskStore.claim` only)."""

_CHUNK: Final = 500
"""Ids per ``IN (...)`` list."""


class SqlTaskStore(TaskStore):
    """:class:`~appdeck.protocol.ports.TaskStore` on SQLAlchemy Core."""

    def __init__(self, engine: AsyncEngine, *, dead_after: float = DEAD_AFTER_SECONDS) -> None:
        self._engine = engine
        self._dead_after = dead_after

    async def insert(self, task: Task) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(sa.insert(tasks).values(_row(task)))

    async def update(self, task: Task) -> bool:
        """Rewrite the task's state (everything but its id, owner, creation time and
        instance) if the stored task is still running under ``task.instance_id``. False:
        refused, nothing written (another process ended it, or took it over)."""
        values = {k: v for k, v in _row(task).items() if k not in _FIXED}
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.update(tasks)
                .where(
                    tasks.c.task_id == task.task_id,
                    tasks.c.status.in_(RUNNING),
                    tasks.c.instance_id == task.instance_id,
                )
                .values(values)
            )
        return result.rowcount == 1

    async def claim(self, task: Task, instance_id: str) -> bool:
        """Move a running task from ``task.instance_id`` (read by the caller) to
        ``instance_id``. False: it ended or another process claimed it first."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.update(tasks)
                .where(
                    tasks.c.task_id == task.task_id,
                    tasks.c.status.in_(RUNNING),
                    tasks.c.instance_id == task.instance_id,
                )
                .values(instance_id=instance_id)
            )
        return result.rowcount == 1

    async def statuses(self, task_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """``task_id -> (status, instance_id)`` of these tasks (absent: deleted)."""
        found: dict[str, tuple[str, str]] = {}
        ids = list(dict.fromkeys(task_ids))
        async with self._engine.connect() as conn:
            for start in range(0, len(ids), _CHUNK):
                query = sa.select(tasks.c.task_id, tasks.c.status, tasks.c.instance_id).where(
                    tasks.c.task_id.in_(ids[start : start + _CHUNK])
                )
                for task_id, status, instance in (await conn.execute(query)).all():
                    found[task_id] = (status, instance)
        return found

    async def get(self, task_id: str) -> Task | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(tasks).where(tasks.c.task_id == task_id))).first()
        return None if row is None else _task(row._mapping)

    async def list_for_owner(
        self, tenant: str, user: str, offset: int, limit: int
    ) -> Sequence[Task]:
        """The owner's tasks, newest first (ties broken by id, so pages are stable)."""
        query = (
            sa.select(tasks)
            .where(tasks.c.tenant == tenant, tasks.c.user == user)
            .order_by(tasks.c.created_at.desc(), tasks.c.task_id.desc())
            .offset(offset)
            .limit(limit)
        )
        return await self._select(query)

    async def orphaned(self, instance_id: str, limit: int) -> Sequence[Task]:
        """Unfinished tasks no live process runs: their instance has no fresh heartbeat in
        ``replicas`` (on the database's clock). Also ``instance_id``'s own: the caller skips
        those it still runs. Oldest first, at most ``limit``."""
        owner_live = live_condition(tasks.c.instance_id, self._engine, self._dead_after)
        query = (
            sa.select(tasks)
            .where(
                tasks.c.status.in_(RUNNING),
                sa.or_(tasks.c.instance_id == instance_id, ~owner_live),
            )
            .order_by(tasks.c.created_at, tasks.c.task_id)
            .limit(limit)
        )
        return await self._select(query)

    async def delete_expired(self, now: float) -> int:
        """Delete tasks whose ttl has run out (``created_at + ttl < now``); returns how many."""
        expired = tasks.c.created_at * 1000 + tasks.c.ttl_ms < now * 1000
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.delete(tasks).where(tasks.c.ttl_ms.is_not(None), expired)
            )
        return result.rowcount

    async def ask(self, task_id: str, requests: Mapping[str, dict[str, Any]], now: float) -> None:
        if not requests:
            return
        rows = [
            {"task_id": task_id, "key": key, "request": request, "asked_at": now}
            for key, request in requests.items()
        ]
        async with self._engine.begin() as conn:
            await conn.execute(sa.insert(task_inputs), rows)

    async def answer(
        self, task_id: str, responses: Mapping[str, dict[str, Any]], now: float
    ) -> int:
        """One compare-and-set per key (``response IS NULL``): the first answer stands."""
        stored = 0
        async with self._engine.begin() as conn:
            for key, response in responses.items():
                result = await conn.execute(
                    sa.update(task_inputs)
                    .where(
                        task_inputs.c.task_id == task_id,
                        task_inputs.c.key == key,
                        task_inputs.c.response.is_(None),
                    )
                    .values(response=response, answered_at=now)
                )
                stored += result.rowcount
        return stored

    async def inputs(
        self, task_id: str
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        query = (
            sa.select(task_inputs.c.key, task_inputs.c.request, task_inputs.c.response)
            .where(task_inputs.c.task_id == task_id)
            .order_by(task_inputs.c.asked_at, task_inputs.c.key)
        )
        pending: dict[str, dict[str, Any]] = {}
        answers: dict[str, dict[str, Any]] = {}
        async with self._engine.connect() as conn:
            for key, request, response in (await conn.execute(query)).all():
                if response is None:
                    pending[key] = request
                else:
                    answers[key] = response
        return pending, answers

    async def _select(self, query: sa.Select[Any]) -> list[Task]:
        async with self._engine.connect() as conn:
            result = await conn.execute(query)
            return [_task(row) for row in result.mappings()]


def _row(task: Task) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "tenant": task.tenant,
        "user": task.user,
        "session_id": task.session_id,
        "status": task.status,
        "status_message": task.status_message,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
        "ttl_ms": task.ttl_ms,
        "poll_interval_ms": task.poll_interval_ms,
        "method": task.method,
        "params": task.params,
        "instance_id": task.instance_id,
        "result": task.result,
        "error": task.error,
        "progress_token": task.progress_token,
    }


def _task(row: sa.RowMapping) -> Task:
    return Task(
        task_id=row["task_id"],
        tenant=row["tenant"],
        user=row["user"],
        session_id=row["session_id"],
        status=row["status"],
        status_message=row["status_message"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        ttl_ms=row["ttl_ms"],
        poll_interval_ms=row["poll_interval_ms"],
        method=row["method"],
        params=row["params"],
        instance_id=row["instance_id"],
        result=row["result"],
        error=row["error"],
        progress_token=row["progress_token"],
    )
