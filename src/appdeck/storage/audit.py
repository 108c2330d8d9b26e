"""The audit log table: appended in batches, read newest-last by ``appdeck audit tail``."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

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
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

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
