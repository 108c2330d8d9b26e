"""Authorization requests waiting for the user's answer, shared by every replica.

A row is the request the consent page showed (``body``, JSON), how many wrong passwords were
typed into it (``attempts``) and when it expires. Any replica may post the answer: the row is
used once, by whoever deletes it (``DELETE … RETURNING``: of two posts racing on two replicas,
one gets the row, the other nothing); a wrong password is counted by a conditional
``UPDATE`` (never past the limit, never on an expired or answered request). The table is
bounded: a new request pushes out the oldest past ``cap``, and expired rows are purged.

Times are the caller's clock (epoch seconds), as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.schema import consent_requests

_COLUMNS = (
    consent_requests.c.id,
    consent_requests.c.body,
    consent_requests.c.attempts,
    consent_requests.c.expires_at,
)


@dataclass(frozen=True, slots=True)
class ConsentRow:
    id: str
    body: Any
    """As stored: the caller checks its shape (a row is data, not trusted code)."""
    attempts: int
    expires_at: float


def _row(row: Any) -> ConsentRow:
    return ConsentRow(row.id, row.body, int(row.attempts), float(row.expires_at))


class ConsentStore:
    def __init__(self, engine: AsyncEngine, *, trim_every: int = 1) -> None:
        self._engine = engine
        self._trim_every = max(1, trim_every)
        self._inserted = 0

    async def insert(
        self, consent_id: str, body: dict[str, Any], expires_at: float, *, cap: int
    ) -> None:
        """Store a new request; past ``cap`` rows, the ones expiring first are deleted. The
        trim walks ``cap`` index entries, so with ``trim_every`` > 1 it runs on every so many
        inserts of this store only: the table then holds at most ``cap`` + ``trim_every``
        rows per replica."""
        self._inserted += 1
        trim = self._inserted % self._trim_every == 0
        # the expiry of the cap-th newest request: older ones go (an index walk, no sort)
        boundary = (
            sa.select(consent_requests.c.expires_at)
            .order_by(consent_requests.c.expires_at.desc())
            .offset(max(0, cap - 1))
            .limit(1)
            .scalar_subquery()
        )
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.insert(consent_requests).values(
                    id=consent_id, body=body, attempts=0, expires_at=expires_at
                )
            )
            if trim:
                await conn.execute(
                    sa.delete(consent_requests).where(consent_requests.c.expires_at < boundary)
                )

    async def get(self, consent_id: str, now: float) -> ConsentRow | None:
        """The request, unless expired or answered."""
        query = sa.select(*_COLUMNS).where(
            consent_requests.c.id == consent_id, consent_requests.c.expires_at > now
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _row(row)

    async def take(self, consent_id: str, now: float) -> ConsentRow | None:
        """Delete the request and return it: only one caller ever gets it. None when it was
        answered already or expired (an expired one is deleted too)."""
        query = (
            sa.delete(consent_requests)
            .where(consent_requests.c.id == consent_id)
            .returning(*_COLUMNS)
        )
        async with self._engine.begin() as conn:
            row = (await conn.execute(query)).first()
        if row is None or float(row.expires_at) <= now:
            return None
        return _row(row)

    async def failed_attempt(self, consent_id: str, now: float, limit: int) -> int | None:
        """Count one wrong password: the new count, or None when the request is gone, expired
        or already at ``limit`` (then nothing is counted)."""
        query = (
            sa.update(consent_requests)
            .where(
                consent_requests.c.id == consent_id,
                consent_requests.c.expires_at > now,
                consent_requests.c.attempts < limit,
            )
            .values(attempts=consent_requests.c.attempts + 1)
            .returning(consent_requests.c.attempts)
        )
        async with self._engine.begin() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else int(row.attempts)

    async def discard(self, consent_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.delete(consent_requests).where(consent_requests.c.id == consent_id)
            )

    async def purge(self, now: float) -> int:
        """Delete the expired requests; how many."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.delete(consent_requests).where(consent_requests.c.expires_at <= now)
            )
        return int(result.rowcount or 0)

    async def count(self) -> int:
        async with self._engine.connect() as conn:
            return int(
                (
                    await conn.execute(sa.select(sa.func.count()).select_from(consent_requests))
                ).scalar_one()
            )
