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
    ) -> RepoRecord:
        """Connect (or reconnect, replacing the secret, token and last commit)."""
        now = time.time()
        values = {
            "url": url,
            "token": token,
            "branch": branch,
            "webhook_secret": webhook_secret,
            "auto_deploy": auto_deploy,
            "last_commit": None,
            "last_message": None,
            "last_push_at": None,
            "connected_by": connected_by,
            "updated_at": now,
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

    async def delete(self, app_id: int) -> bool:
        async with writing(self._engine) as conn:
            done = await conn.execute(
                sa.delete(repo_connections).where(repo_connections.c.app_id == app_id)
            )
        return bool(done.rowcount)
