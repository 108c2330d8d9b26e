"""Repository connections in the database: one per app (``repo_connections``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.engine import writing
from appdeck.storage.schema import repo_connections


@dataclass(frozen=True, slots=True)
class RepoRecord:
    app_id: int
    url: str
    token: str | None  # sealed
    branch: str
    webhook_secret: str  # sealed
    auto_deploy: bool
    last_commit: str | None
    last_message: str | None
    last_push_at: float | None
    connected_by: str
    created_at: float
    updated_at: float
    poll_seconds: int | None = None
    """Polling every so many seconds (None: off)."""
    polled_at: float | None = None
    """The last poll (or, after a failure, the time before which it is not polled again)."""


def _record(row: Any) -> RepoRecord:
    return RepoRecord(
        app_id=int(row.app_id),
        url=row.url,
        token=row.token,
        branch=row.branch,
        webhook_secret=row.webhook_secret,
        auto_deploy=bool(row.auto_deploy),
        last_commit=row.last_commit,
        last_message=row.last_message,
        last_push_at=row.last_push_at,
        connected_by=row.connected_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        poll_seconds=row.poll_seconds,
        polled_at=row.polled_at,
    )


class RepoStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get(self, app_id: int) -> RepoRecord | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(repo_connections).where(repo_connections.c.app_id == app_id)
                )
            ).first()
        return _record(row) if row is not None else None

    async def put(
        self,
        *,
        app_id: int,
        url: str,
        token: str | None,
        branch: str,
        webhook_secret: str,
        auto_deploy: bool,
        connected_by: str,
        poll_seconds: int | None = None,
        head: str | None = None,
    ) -> RepoRecord:
        """Connect (or reconnect, replacing the secret, token and last commit). With
        ``poll_seconds``, ``head`` is the commit polling compares with first."""
        now = time.time()
        polled = poll_seconds is not None
        values = {
            "url": url,
            "token": token,
            "branch": branch,
            "webhook_secret": webhook_secret,
            "auto_deploy": auto_deploy,
            "last_commit": head if polled else None,
            "last_message": None,
            "last_push_at": None,
            "connected_by": connected_by,
            "updated_at": now,
            "poll_seconds": poll_seconds,
            "polled_at": now if polled else None,
        }
        async with writing(self._engine) as conn:
            where = repo_connections.c.app_id == app_id
            found = (await conn.execute(sa.select(repo_connections.c.app_id).where(where))).first()
            if found is None:
                await conn.execute(
                    sa.insert(repo_connections).values(app_id=app_id, created_at=now, **values)
                )
            else:
                await conn.execute(sa.update(repo_connections).where(where).values(**values))
        record = await self.get(app_id)
        assert record is not None
        return record

    async def pushed(self, app_id: int, commit: str, message: str) -> None:
        now = time.time()
        async with writing(self._engine) as conn:
            await conn.execute(
                sa.update(repo_connections)
                .where(repo_connections.c.app_id == app_id)
                .values(last_commit=commit, last_message=message, last_push_at=now, updated_at=now)
            )

    async def set_polling(self, app_id: int, poll_seconds: int | None) -> RepoRecord | None:
        """Poll every ``poll_seconds`` (None: stop); the first poll is due at once."""
        where = repo_connections.c.app_id == app_id
        values = {"poll_seconds": poll_seconds, "polled_at": None, "updated_at": time.time()}
        async with writing(self._engine) as conn:
            await conn.execute(sa.update(repo_connections).where(where).values(**values))
        return await self.get(app_id)

    async def due(self, now: float, limit: int) -> list[RepoRecord]:
        """Connections whose poll is due (``polled_at + poll_seconds <= now``), oldest first."""
        c = repo_connections.c
        query = (
            sa.select(repo_connections)
            .where(
                c.poll_seconds.is_not(None),
                sa.or_(c.polled_at.is_(None), c.polled_at + c.poll_seconds <= now),
            )
            .order_by(c.polled_at.nulls_first(), c.app_id)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_record(row) for row in rows]

    async def polled(self, app_id: int, at: float) -> None:
        """Mark a poll (``at`` may be ahead: a back-off)."""
        where = repo_connections.c.app_id == app_id
        async with writing(self._engine) as conn:
            await conn.execute(sa.update(repo_connections).where(where).values(polled_at=at))

    async def baseline(self, app_id: int, commit: str) -> None:
        """Fill an empty ``last_commit`` (where polling starts from) without counting a push."""
        c = repo_connections.c
        async with writing(self._engine) as conn:
            await conn.execute(
                sa.update(repo_connections)
                .where(c.app_id == app_id, c.last_commit.is_(None))
                .values(last_commit=commit)
            )

    async def delete(self, app_id: int) -> bool:
        async with writing(self._engine) as conn:
            done = await conn.execute(
                sa.delete(repo_connections).where(repo_connections.c.app_id == app_id)
            )
        return bool(done.rowcount)
