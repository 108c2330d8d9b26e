"""Tasks in the database: every state change is written here before it is announced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.protocol.ports import TaskStore
from appdeck.protocol.tasks import INPUT_REQUIRED, WORKING, Task
from appdeck.storage.schema import tasks

RUNNING: Final = (WORKING, INPUT_REQUIRED)
"""The statuses of a task some process is still responsible for."""

_FIXED: Final = frozenset({"task_id", "tenant", "user", "created_at"})
"""Columns :meth:`SqlTaskStore.update` leaves alone: the key, the owner, the birth time."""


class SqlTaskStore(TaskStore):
    """:class:`~appdeck.protocol.ports.TaskStore` on SQLAlchemy Core."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def insert(self, task: Task) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(sa.insert(tasks).values(_row(task)))

    async def update(self, task: Task) -> None:
        """Rewrite the task's state: everything but its id, owner and creation time."""
        values = {k: v for k, v in _row(task).items() if k not in _FIXED}
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(tasks).where(tasks.c.task_id == task.task_id).values(values)
            )

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

    async def working_elsewhere(self, instance_id: str) -> Sequence[Task]:
        """Unfinished tasks that another process (perhaps a dead one) was running."""
        query = (
            sa.select(tasks)
            .where(tasks.c.status.in_(RUNNING), tasks.c.instance_id != instance_id)
            .order_by(tasks.c.created_at, tasks.c.task_id)
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
