"""Async engines for the two supported databases.

``sqlite+aiosqlite:///path`` is the embedded default; ``postgresql+asyncpg://…`` is for scale.
Every SQLite connection is put in WAL mode with ``synchronous=NORMAL``, a busy timeout and
foreign keys on, so several processes can share one database file.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

SQLITE_BUSY_TIMEOUT_MS = 5000
"""How long a SQLite connection waits for another writer before it gives up."""

_SQLITE_PRAGMAS = (
    "PRAGMA synchronous = NORMAL",  # with WAL: never corrupt, a power cut may lose the last commits
    "PRAGMA foreign_keys = ON",
)

log = logging.getLogger("appdeck.storage")


def create_engine(url: str) -> AsyncEngine:
    """An async engine for ``url`` (SQLite through aiosqlite, PostgreSQL through asyncpg)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.get_driver_name() != "aiosqlite":
            raise ValueError("SQLite URLs must use the async driver: sqlite+aiosqlite:///path")
        engine = create_async_engine(parsed)
        event.listen(engine.sync_engine, "connect", _set_sqlite_pragmas)
        return engine
    if backend == "postgresql":
        if parsed.get_driver_name() != "asyncpg":
            raise ValueError("PostgreSQL URLs must use the async driver: postgresql+asyncpg://…")
        return create_async_engine(
            parsed,
            pool_size=10,
            max_overflow=10,
            pool_timeout=30,
            pool_recycle=1800,  # outlive idle-connection killers in proxies and poolers
            pool_pre_ping=True,  # a restarted server costs one reconnect, not a failed request
        )
    raise ValueError(
        f"unsupported database {backend!r}: use sqlite+aiosqlite or postgresql+asyncpg"
    )


def default_sqlite_url(data_dir: Path) -> str:
    """The URL of ``appdeck.db`` in ``data_dir``, creating the directory when missing."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = (data_dir / "appdeck.db").resolve()
    return URL.create("sqlite+aiosqlite", database=str(path)).render_as_string()


def _set_sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            # Turning a new file to WAL needs an exclusive lock, and SQLite refuses at once
            # (no busy wait) while another connection converts it too. WAL is a property of
            # the file: this connection follows the switch at its next transaction.
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            log.debug("another connection is switching the database to WAL")
        for pragma in _SQLITE_PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()
