"""Async engines for the two supported databases.

``sqlite+aiosqlite:///path`` is the embedded default; ``postgresql+asyncpg://…`` is for scale.
Every SQLite connection is put in WAL mode with ``synchronous=NORMAL``, a busy timeout and
foreign keys on, so several processes can share one database file.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from appdeck.common.errors import Unavailable
from appdeck.storage import sqlite_driver

SQLITE_BUSY_TIMEOUT_MS = 5000
"""How long a SQLite connection waits for another writer before it gives up."""

PG_IDLE_IN_TRANSACTION_MS = 30_000
"""How long PostgreSQL lets one of the platform's sessions sit idle inside a transaction before
it ends the session (``idle_in_transaction_session_timeout``). A replica paused or stalled
between a statement and its ``COMMIT`` (SIGSTOP, a VM pause, a frozen event loop) would
otherwise hold that transaction's row and advisory locks for as long as it is away, and every
other replica's write to those rows waits with it: an app lease it was renewing could never be
taken over. The platform's own transactions are a few statements long; none waits on anything
else between them."""

WRITE_ATTEMPTS = 3
"""How many times :func:`writing` asks SQLite for the write lock (each waiting the busy timeout)
before the caller gets ``unavailable``."""

_SQLITE_PRAGMAS = (
    "PRAGMA synchronous = NORMAL",  # with WAL: never corrupt, a power cut may lose the last commits
    "PRAGMA foreign_keys = ON",
)

log = logging.getLogger("appdeck.storage")


_NOTHING: dict[None, None] = {}


# sqlite3 binds ``None`` as NULL only after asking, in turn, its adapter registry, the
# PrepareProtocol type for ``__adapt__`` (an attribute lookup on a type: a formatted
# AttributeError raised and dropped every time) and ``None.__conform__``: ~1,900 instructions
# per NULL parameter, six per audit row. An adapter registered for ``NoneType`` answers at
# the first step, with the same NULL. Process-wide, like every sqlite3 adapter: the audit
# writer, aiosqlite under SQLAlchemy and the apps' databases all bind None this way. (Only
# adapters for int, float, str or bytearray slow sqlite3 down; NoneType is not one of them.)
# The adapter is an empty dict's ``get``: None for None, in C, without a Python frame per NULL.
sqlite3.register_adapter(type(None), _NOTHING.get)


def create_engine(
    url: str, *, idle_in_transaction_ms: int = PG_IDLE_IN_TRANSACTION_MS
) -> AsyncEngine:
    """An async engine for ``url`` (SQLite through aiosqlite, PostgreSQL through asyncpg).
    PostgreSQL sessions left idle in a transaction past ``idle_in_transaction_ms`` are ended
    by the server (see :data:`PG_IDLE_IN_TRANSACTION_MS`)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.get_driver_name() != "aiosqlite":
            raise ValueError("SQLite URLs must use the async driver: sqlite+aiosqlite:///path")
        engine = create_async_engine(parsed, module=sqlite_driver.dbapi())
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
            connect_args={
                "server_settings": {
                    "idle_in_transaction_session_timeout": str(idle_in_transaction_ms)
                }
            },
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


def is_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" / "busy" (another writer held on)."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    return isinstance(exc, OperationalError | sqlite3.OperationalError) and (
        "database is locked" in text or "database is busy" in text
    )


@asynccontextmanager
async def writing(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A write transaction whose reads and writes are serialized with other writers.

    SQLite: ``BEGIN IMMEDIATE`` takes the write lock before the first read, so a
    check-then-insert cannot interleave with another, and a reader never has to upgrade a stale
    snapshot (the ``database is locked`` that no busy timeout cures). Waiting for the lock uses
    the busy timeout, then is retried; still locked, the caller gets :class:`Unavailable`.
    PostgreSQL: an ordinary transaction; take :func:`serialized` locks inside it.
    """
    if engine.dialect.name != "sqlite":
        async with engine.begin() as conn:
            yield conn
        return
    async with engine.connect() as conn:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                await conn.exec_driver_sql("BEGIN IMMEDIATE")
                break
            except OperationalError as exc:
                await conn.rollback()
                if not is_locked(exc):
                    raise
                if attempt == WRITE_ATTEMPTS:
                    raise Unavailable(
                        "the database is busy with other writes", hint="retry in a moment"
                    ) from None
                log.debug("SQLite write lock busy (attempt %d); retrying", attempt)
                await asyncio.sleep(0.05 * attempt)
        try:
            yield conn
        except BaseException:
            await conn.rollback()
            raise
        await conn.commit()


async def serialized(conn: AsyncConnection, key: str) -> None:
    """Hold a lock named ``key`` until ``conn``'s transaction ends (PostgreSQL: a transaction
    advisory lock; SQLite: already held, :func:`writing` took the database's write lock)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(key))))
