"""Bring a database's schema up to date: ``alembic upgrade head``, from code.

Safe to call at every start-up, and from several processes at once: the upgrade runs in one
transaction that first takes the database's migration lock (SQLite: ``BEGIN IMMEDIATE``, the
file's write lock; PostgreSQL: a transaction-scoped advisory lock), so the second caller waits,
then finds the schema at head and does nothing. Alembic keeps the running migration in module
globals, so within one event loop migrations also take turns (two databases at once included).
"""

from __future__ import annotations

import asyncio
import weakref
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

MIGRATIONS_DIR = Path(__file__).with_name("migrations")

PG_MIGRATION_LOCK = 0x61707064_65636B00  # "appdeck\0": the advisory lock key of migrations
SQLITE_MIGRATION_WAIT_MS = 120_000
"""How long a SQLite caller waits for another process's migration to finish."""

_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration for AppDeck's migrations, built in code (no alembic.ini).

    With ``connection``, the migrations run on it, inside its current transaction.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


async def migrate(engine: AsyncEngine) -> None:
    """Upgrade the database behind ``engine`` to the newest schema."""
    turn = _turns.setdefault(asyncio.get_running_loop(), asyncio.Lock())
    async with turn, engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        try:
            if sqlite:
                await connection.exec_driver_sql(
                    f"PRAGMA busy_timeout = {SQLITE_MIGRATION_WAIT_MS}"
                )
            await _lock(connection)
            await connection.run_sync(_upgrade)
            await connection.commit()
        finally:
            if sqlite:
                await connection.invalidate()  # keep the long busy timeout out of the pool


async def _lock(connection: AsyncConnection) -> None:
    """Start the migration transaction holding the lock; it is released at commit."""
    if connection.dialect.name == "sqlite":
        # pysqlite would open a deferred transaction only at the first INSERT; take the write
        # lock now, so the version check below sees the other process's finished migration.
        await connection.exec_driver_sql("BEGIN IMMEDIATE")
    elif connection.dialect.name == "postgresql":
        await connection.execute(
            text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK}
        )


@cache
def head_revision() -> str | None:
    """The newest revision of the migrations shipped with this code (read once per process:
    parsing every migration script is most of what an up-to-date start costs)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade(connection: Connection) -> None:
    # At head already (every start but the first after an upgrade): nothing to load or run.
    if MigrationContext.configure(connection).get_current_revision() == head_revision():
        return
    command.upgrade(alembic_config(connection), "head")
