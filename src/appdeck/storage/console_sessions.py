"""Console sessions: one row per browser signed in to ``/console`` (issue 24).

The browser holds a random secret in an HttpOnly cookie; the row holds its SHA-256 and a
public handle (``id``) the sessions page shows and revokes by. Every replica reads the same
rows, so a browser may land on any of them; revoking is deleting the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.schema import console_sessions

MAX_PER_USER: Final = 20
"""Sessions one user keeps at most: signing in past it ends the oldest."""
MAX_LISTED: Final = 200


@dataclass(frozen=True, slots=True)
class ConsoleSessionRow:
    id: str
    tenant_id: str
    user_id: str
    csrf: str
    ip: str | None
    user_agent: str | None
    created_at: float
    last_seen: float
    expires_at: float


def _row(r: sa.Row[tuple[object, ...]]) -> ConsoleSessionRow:
    m = r._mapping
    return ConsoleSessionRow(
        id=str(m["id"]),
        tenant_id=str(m["tenant_id"]),
        user_id=str(m["user_id"]),
        csrf=str(m["csrf"]),
        ip=None if m["ip"] is None else str(m["ip"]),
        user_agent=None if m["user_agent"] is None else str(m["user_agent"]),
        created_at=float(m["created_at"]),
        last_seen=float(m["last_seen"]),
        expires_at=float(m["expires_at"]),
    )


_COLUMNS = [c for c in console_sessions.c if c.name != "secret_hash"]


class ConsoleSessionStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(self, row: ConsoleSessionRow, secret_hash: str) -> None:
        """Insert ``row``; the user's oldest sessions past :data:`MAX_PER_USER` end."""
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.insert(console_sessions).values(
                    secret_hash=secret_hash,
                    id=row.id,
                    tenant_id=row.tenant_id,
                    user_id=row.user_id,
                    csrf=row.csrf,
                    ip=row.ip,
                    user_agent=row.user_agent,
                    created_at=row.created_at,
                    last_seen=row.last_seen,
                    expires_at=row.expires_at,
                )
            )
            keep = (
                sa.select(console_sessions.c.id)
                .where(
                    console_sessions.c.tenant_id == row.tenant_id,
                    console_sessions.c.user_id == row.user_id,
                )
                .order_by(console_sessions.c.created_at.desc(), console_sessions.c.id.desc())
                .limit(MAX_PER_USER)
            )
            kept = [r.id for r in (await conn.execute(keep)).all()]
            await conn.execute(
                sa.delete(console_sessions).where(
                    console_sessions.c.tenant_id == row.tenant_id,
                    console_sessions.c.user_id == row.user_id,
                    console_sessions.c.id.not_in(kept),
                )
            )

    async def find(self, secret_hash: str, now: float) -> ConsoleSessionRow | None:
        query = sa.select(*_COLUMNS).where(
            console_sessions.c.secret_hash == secret_hash, console_sessions.c.expires_at > now
        )
        async with self._engine.connect() as conn:
            found = (await conn.execute(query)).first()
        return None if found is None else _row(found)

    async def touch(self, session_id: str, now: float, expires_at: float) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(console_sessions)
                .where(console_sessions.c.id == session_id)
                .values(last_seen=now, expires_at=expires_at)
            )

    async def for_user(self, tenant_id: str, user_id: str, now: float) -> list[ConsoleSessionRow]:
        query = (
            sa.select(*_COLUMNS)
            .where(
                console_sessions.c.tenant_id == tenant_id,
                console_sessions.c.user_id == user_id,
                console_sessions.c.expires_at > now,
            )
            .order_by(console_sessions.c.last_seen.desc())
            .limit(MAX_LISTED)
        )
        async with self._engine.connect() as conn:
            return [_row(r) for r in (await conn.execute(query)).all()]

    async def for_tenant(self, tenant_id: str, now: float) -> list[ConsoleSessionRow]:
        query = (
            sa.select(*_COLUMNS)
            .where(console_sessions.c.tenant_id == tenant_id, console_sessions.c.expires_at > now)
            .order_by(console_sessions.c.last_seen.desc())
            .limit(MAX_LISTED)
        )
        async with self._engine.connect() as conn:
            return [_row(r) for r in (await conn.execute(query)).all()]

    async def delete(self, tenant_id: str, session_id: str, user_id: str | None = None) -> bool:
        """End one session of ``tenant_id`` (of ``user_id`` only, when given)."""
        query = sa.delete(console_sessions).where(
            console_sessions.c.id == session_id, console_sessions.c.tenant_id == tenant_id
        )
        if user_id is not None:
            query = query.where(console_sessions.c.user_id == user_id)
        async with self._engine.begin() as conn:
            return (await conn.execute(query)).rowcount > 0

    async def delete_user(self, tenant_id: str, user_id: str) -> int:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.delete(console_sessions).where(
                    console_sessions.c.tenant_id == tenant_id,
                    console_sessions.c.user_id == user_id,
                )
            )
            return result.rowcount

    async def purge(self, now: float) -> int:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.delete(console_sessions).where(console_sessions.c.expires_at <= now)
            )
            return result.rowcount
