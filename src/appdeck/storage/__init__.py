"""Durable storage on SQLAlchemy Core: SQLite by default, PostgreSQL for scale.

storage = await Storage.open(url)   # engine + migrations + the three stores
storage.sessions / storage.tasks / storage.events
await storage.close()
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.engine import create_engine, default_sqlite_url
from appdeck.storage.events import SqlEventLog
from appdeck.storage.migrate import migrate
from appdeck.storage.sessions import SqlSessionStore
from appdeck.storage.tasks import SqlTaskStore

__all__ = [
    "SqlEventLog",
    "SqlSessionStore",
    "SqlTaskStore",
    "Storage",
    "create_engine",
    "default_sqlite_url",
    "migrate",
]


@dataclass(frozen=True, slots=True)
class Storage:
    """An open database: its engine and the stores built on it."""

    engine: AsyncEngine
    sessions: SqlSessionStore
    tasks: SqlTaskStore
    events: SqlEventLog

    @classmethod
    async def open(cls, url: str) -> Storage:
        """Connect to ``url``, bring its schema up to date and build the stores."""
        engine = create_engine(url)
        try:
            await migrate(engine)
        except BaseException:
            await engine.dispose()
            raise
        return cls(
            engine=engine,
            sessions=SqlSessionStore(engine),
            tasks=SqlTaskStore(engine),
            events=SqlEventLog(engine),
        )

    async def close(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()
