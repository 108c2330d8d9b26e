"""The audit log table: appended in batches, read newest-last by ``appdeck audit tail``.

The server's rows are written by ``auth.audit.AuditLog``'s writer thread through a store of its
own (:meth:`AuditStore.opener`): an engine created on that thread's event loop, so the writes
never share a connection, or a loop, with the request path.
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.engine import create_engine
from appdeck.storage.schema import audit_log

COLUMNS = tuple(c.name for c in audit_log.columns if c.name != "id")
_SQLITE_INSERT = str(
    sa.insert(audit_log)
    .values({c: sa.bindparam(c) for c in COLUMNS})
    .compile(dialect=sqlite.dialect(paramstyle="qmark"))
)


_VALUES = operator.itemgetter(*COLUMNS)
_DETAIL = COLUMNS.index("detail")


def _tuple(row: dict[str, Any]) -> tuple[Any, ...]:
    values: tuple[Any, ...] = _VALUES(row)
    detail = values[_DETAIL]
    if detail is None:
        return values
    serialised = list(values)
    serialised[_DETAIL] = orjson.dumps(detail).decode()
    return tuple(serialised)


class AuditStore:
    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = False) -> None:
        self._engine = engine
        self._owns_engine = owns_engine

    @staticmethod
    def opener(url: str) -> Callable[[], Awaitable[AuditStore]]:
        """Opens a store with an engine of its own on the calling event loop (the audit
        writer thread's), for an already migrated database at ``url``."""

        async def open_store() -> AuditStore:
            store = AuditStore(create_engine(url), owns_engine=True)
            await store.ping()
            return store

        return open_store

    async def ping(self) -> None:
        """Return when the database answers; raise when it does not."""
        async with self._engine.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")

    async def close(self) -> None:
        if self._owns_engine:
            await self._engine.dispose()

    async def append(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        async with self._engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                # One row per tools/call: SQLAlchemy's per-row bind processing costs ~9 µs a
                # row on top of SQLite's own ~5 µs, so hand plain tuples to the driver.
                values = [_tuple(row) for row in rows]
                await conn.exec_driver_sql(_SQLITE_INSERT, values)
            else:
                await conn.execute(
                    sa.insert(audit_log), [{c: row.get(c) for c in COLUMNS} for row in rows]
                )

    async def tail(
        self, limit: int = 50, *, after_id: int | None = None, tenant_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` rows (or those after ``after_id``), oldest first."""
        query = sa.select(audit_log)
        if tenant_id is not None:
            query = query.where(audit_log.c.tenant_id == tenant_id)
        if after_id is not None:
            query = query.where(audit_log.c.id > after_id).order_by(audit_log.c.id).limit(limit)
            async with self._engine.connect() as conn:
                return [dict(r) for r in (await conn.execute(query)).mappings()]
        query = query.order_by(audit_log.c.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            rows = [dict(r) for r in (await conn.execute(query)).mappings()]
        return rows[::-1]
