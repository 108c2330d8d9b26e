"""The audit log table: appended in batches, read newest-last by ``appdeck audit tail``.

The server's rows are written by ``auth.audit.AuditLog``'s writer thread through a sink of its
own (:meth:`AuditStore.opener`), so the writes never share a connection, or an event loop, with
the request path: on SQLite the stdlib driver on a connection of its own (:class:`SqliteWriter`:
no driver thread, no loop hand-offs, no SQLAlchemy per row), on PostgreSQL an engine created on
the writer thread's own event loop.
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.engine import SQLITE_BUSY_TIMEOUT_MS, create_engine
from appdeck.storage.schema import audit_log

COLUMNS = tuple(c.name for c in audit_log.columns if c.name != "id")
_SQLITE_INSERT = str(
    sa.insert(audit_log)
    .values({c: sa.bindparam(c) for c in COLUMNS})
    .compile(dialect=sqlite.dialect(paramstyle="qmark"))
)


_SQLITE_HEAD, _, _SQLITE_ROW = _SQLITE_INSERT.partition(" VALUES ")
_ROWS_PER_INSERT = 1000
"""Rows per INSERT statement: 14 bound values a row, well under SQLite's 32,766."""


def _multi_insert(rows: int) -> str:
    return f"{_SQLITE_HEAD} VALUES {', '.join([_SQLITE_ROW] * rows)}"


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


MAX_PAGE: Final = 100
"""Rows one :meth:`AuditStore.search` returns at most."""


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which rows of one tenant :meth:`AuditStore.search` reads (each None: any)."""

    tenant_id: str
    user_id: str | None = None
    app_id: int | None = None
    name: str | None = None
    """A tool's name or an event's (``tool_call``, ``token_revoked``, ``console_action`` ...)."""
    since: float | None = None
    until: float | None = None


class AuditStore:
    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = False) -> None:
        self._engine = engine
        self._owns_engine = owns_engine

    @staticmethod
    def opener(url: str) -> Callable[[], Awaitable[AuditStore | SqliteWriter]]:
        """Opens a sink with a connection of its own, on the calling thread and event loop
        (the audit writer's), for the already migrated database at ``url``."""
        parsed = make_url(url)

        async def open_sink() -> AuditStore | SqliteWriter:
            sink: AuditStore | SqliteWriter
            if parsed.get_backend_name() == "sqlite":
                sink = SqliteWriter(str(parsed.database))
            else:
                sink = AuditStore(create_engine(url), owns_engine=True)
            await sink.ping()
            return sink

        return open_sink

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

    async def search(
        self, where: AuditFilter, *, before_id: int | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """One tenant's rows matching ``where``, newest first: at most ``limit`` (capped at
        :data:`MAX_PAGE`) with an id below ``before_id`` (keyset paging: the next page starts
        below the last id shown)."""
        c = audit_log.c
        query = sa.select(audit_log).where(c.tenant_id == where.tenant_id)
        if where.user_id is not None:
            query = query.where(c.user_id == where.user_id)
        if where.app_id is not None:
            query = query.where(c.app_id == where.app_id)
        if where.name is not None:
            query = query.where(sa.or_(c.tool == where.name, c.event == where.name))
        if where.since is not None:
            query = query.where(c.ts >= where.since)
        if where.until is not None:
            query = query.where(c.ts < where.until)
        if before_id is not None:
            query = query.where(c.id < before_id)
        query = query.order_by(c.id.desc()).limit(max(1, min(limit, MAX_PAGE)))
        async with self._engine.connect() as conn:
            return [dict(r) for r in (await conn.execute(query)).mappings()]


class SqliteWriter:
    """Appends audit rows through the stdlib driver, on a connection that only the audit
    writer thread uses (the file is in WAL mode already: the server's engine set it)."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        self._conn.execute("PRAGMA synchronous = NORMAL")

    async def append(self, rows: Sequence[dict[str, Any]]) -> None:
        # One multi-row INSERT per chunk, not executemany: the driver releases the GIL around
        # every statement step, and on a busy one-core server each release is a thread switch
        # away from the event loop and back (~3 µs a row).
        if not rows:
            return
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for start in range(0, len(rows), _ROWS_PER_INSERT):
                chunk = rows[start : start + _ROWS_PER_INSERT]
                values = [value for row in chunk for value in _tuple(row)]
                conn.execute(_multi_insert(len(chunk)), values)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    async def ping(self) -> None:
        self._conn.execute("SELECT 1").fetchall()

    async def close(self) -> None:
        self._conn.close()
