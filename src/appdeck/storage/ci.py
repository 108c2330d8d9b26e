"""CI in the database: an app's configuration (``ci_configs``) and its runs (``ci_runs``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.deployments import MAX_NUMBER
from appdeck.storage.engine import serialized, writing
from appdeck.storage.schema import ci_configs, ci_runs


@dataclass(frozen=True, slots=True)
class CIConfigRecord:
    app_id: int
    branch: str | None
    test_command: str
    auto_deploy: bool
    strategy: str | None
    require_green: bool
    timeout_seconds: int
    updated_by: str
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class CIRunRecord:
    app_id: int
    number: int
    commit: str
    message: str | None
    branch: str
    trigger: str
    state: str
    status_message: str | None
    exit_code: int | None
    log: str
    deployment: int | None
    task_id: str | None
    created_by: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    instance_id: str | None


def _config(row: Any) -> CIConfigRecord:
    return CIConfigRecord(
        app_id=int(row.app_id),
        branch=row.branch,
        test_command=row.test_command,
        auto_deploy=bool(row.auto_deploy),
        strategy=row.strategy,
        require_green=bool(row.require_green),
        timeout_seconds=int(row.timeout_seconds),
        updated_by=row.updated_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _run(row: Any) -> CIRunRecord:
    return CIRunRecord(
        app_id=int(row.app_id),
        number=int(row.number),
        commit=row.commit,
        message=row.message,
        branch=row.branch,
        trigger=row.trigger,
        state=row.state,
        status_message=row.status_message,
        exit_code=row.exit_code,
        log=row.log,
        deployment=row.deployment,
        task_id=row.task_id,
        created_by=row.created_by,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        instance_id=row.instance_id,
    )


class CIStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    # -- configuration ------------------------------------------------------------------

    async def config(self, app_id: int) -> CIConfigRecord | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(sa.select(ci_configs).where(ci_configs.c.app_id == app_id))
            ).first()
        return None if row is None else _config(row)

    async def configure(self, app_id: int, values: dict[str, Any], by: str) -> CIConfigRecord:
        """Insert or replace the app's configuration (``values``: the columns but the keys)."""
        now = time.time()
        async with writing(self._engine) as conn:
            await serialized(conn, f"ci-config-{app_id}")
            found = (
                await conn.execute(
                    sa.select(ci_configs.c.app_id).where(ci_configs.c.app_id == app_id)
                )
            ).first()
            if found is None:
                await conn.execute(
                    sa.insert(ci_configs).values(
                        app_id=app_id, updated_by=by, created_at=now, updated_at=now, **values
                    )
                )
            else:
                await conn.execute(
                    sa.update(ci_configs)
                    .where(ci_configs.c.app_id == app_id)
                    .values(updated_by=by, updated_at=now, **values)
                )
        record = await self.config(app_id)
        assert record is not None
        return record

    async def unconfigure(self, app_id: int) -> bool:
        async with writing(self._engine) as conn:
            done = await conn.execute(sa.delete(ci_configs).where(ci_configs.c.app_id == app_id))
        return bool(done.rowcount)

    # -- runs ---------------------------------------------------------------------------

    async def create_run(
        self,
        app_id: int,
        *,
        commit: str,
        message: str | None,
        branch: str,
        trigger: str,
        created_by: str,
        instance_id: str,
        state: str,
    ) -> CIRunRecord:
        """A new run numbered after the app's last one (dense: the number is taken under the
        app's lock)."""
        now = time.time()
        async with writing(self._engine) as conn:
            await serialized(conn, f"ci-runs-{app_id}")
            top = await conn.execute(
                sa.select(sa.func.max(ci_runs.c.number)).where(ci_runs.c.app_id == app_id)
            )
            number = int(top.scalar() or 0) + 1
            await conn.execute(
                sa.insert(ci_runs).values(
                    app_id=app_id,
                    number=number,
                    commit=commit,
                    message=message,
                    branch=branch,
                    trigger=trigger,
                    state=state,
                    status_message="Queued",
                    log="",
                    created_by=created_by,
                    created_at=now,
                    instance_id=instance_id,
                )
            )
        record = await self.run(app_id, number)
        assert record is not None
        return record

    async def run(self, app_id: int, number: int) -> CIRunRecord | None:
        if not 0 < number <= MAX_NUMBER:  # the column is 32-bit: nothing out there
            return None
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(ci_runs).where(ci_runs.c.app_id == app_id, ci_runs.c.number == number)
                )
            ).first()
        return None if row is None else _run(row)

    async def runs(self, app_id: int, *, offset: int, limit: int) -> list[CIRunRecord]:
        """Newest first, without their logs (``log`` is empty: a list shows no log, and each
        may hold 256 KiB; :meth:`run` reads one with its log)."""
        columns = [c for c in ci_runs.c if c.name != "log"]
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                sa.select(*columns, sa.literal("").label("log"))
                .where(ci_runs.c.app_id == app_id)
                .order_by(ci_runs.c.number.desc())
                .offset(offset)
                .limit(limit)
            )
            return [_run(row) for row in rows]

    async def passed(self, app_id: int, commit: str) -> bool:
        async with self._engine.connect() as conn:
            row = await conn.execute(
                sa.select(ci_runs.c.number)
                .where(
                    ci_runs.c.app_id == app_id,
                    ci_runs.c.commit == commit,
                    ci_runs.c.state == "passed",
                )
                .limit(1)
            )
            return row.first() is not None

    async def update(
        self, app_id: int, number: int, *, from_states: tuple[str, ...] | None = None, **values: Any
    ) -> bool:
        """Set ``values`` on the run; with ``from_states``, only while it is in one of them
        (compare-and-set: a run cancelled elsewhere is not overwritten)."""
        query = sa.update(ci_runs).where(ci_runs.c.app_id == app_id, ci_runs.c.number == number)
        if from_states is not None:
            query = query.where(ci_runs.c.state.in_(from_states))
        async with writing(self._engine) as conn:
            done = await conn.execute(query.values(**values))
        return bool(done.rowcount)

    async def prune(self, app_id: int, keep: int) -> int:
        """Drop the app's runs older than its last ``keep`` (their logs with them)."""
        async with writing(self._engine) as conn:
            top = await conn.execute(
                sa.select(sa.func.max(ci_runs.c.number)).where(ci_runs.c.app_id == app_id)
            )
            last = int(top.scalar() or 0)
            done = await conn.execute(
                sa.delete(ci_runs).where(
                    ci_runs.c.app_id == app_id, ci_runs.c.number <= last - keep
                )
            )
        return int(done.rowcount or 0)

    async def interrupted(self, states: tuple[str, ...], instance_id: str, message: str) -> int:
        """Runs left in ``states`` by another (dead) server process end ``error``."""
        async with writing(self._engine) as conn:
            done = await conn.execute(
                sa.update(ci_runs)
                .where(
                    ci_runs.c.state.in_(states),
                    sa.or_(ci_runs.c.instance_id.is_(None), ci_runs.c.instance_id != instance_id),
                )
                .values(state="error", status_message=message, finished_at=time.time())
            )
        return int(done.rowcount or 0)
