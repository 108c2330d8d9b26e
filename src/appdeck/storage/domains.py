"""Custom domains' claims (``app_domains``): which app holds a hostname, and whether its owner
proved control yet. The primary key is the hostname, so a hostname has one holder platform-wide
whatever tenants race for it: the database decides, never a check-then-insert.

The rules on top (who may take a claim over, what counts as proof) are the platform's:
:mod:`appdeck.platform.domains`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.engine import writing
from appdeck.storage.schema import app_domains, apps

__all__ = ["PENDING", "VERIFIED", "DomainRecord", "DomainStore", "Method"]

PENDING: Final = "pending"
VERIFIED: Final = "verified"
MAX_ERROR: Final = 300
Method = Literal["txt", "acme"]


@dataclass(frozen=True, slots=True)
class DomainRecord:
    host: str
    app_id: int
    state: str
    method: str | None
    created_at: float
    verified_at: float | None
    checked_at: float | None
    last_error: str | None
    failing_since: float | None = None
    """A verified TXT proof found missing since then (None: it was there at the last check)."""


@dataclass(frozen=True, slots=True)
class Served:
    """A verified hostname and the app (name, tenant) it routes to."""

    host: str
    app_id: int
    app_name: str
    tenant_id: str


def _record(row: sa.Row[tuple[object, ...]]) -> DomainRecord:
    return DomainRecord(**row._asdict())


class DomainStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def _insert_free(self, rows: list[dict[str, object]]) -> sa.Executable:
        """Insert ``rows``, skipping each whose host is held already."""
        if self._engine.dialect.name == "postgresql":
            return postgresql.insert(app_domains).values(rows).on_conflict_do_nothing()
        return sqlite.insert(app_domains).values(rows).on_conflict_do_nothing()

    async def of_app(self, app_id: int) -> list[DomainRecord]:
        query = sa.select(app_domains).where(app_domains.c.app_id == app_id)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query.order_by(app_domains.c.host))).all()
        return [_record(r) for r in rows]

    async def holds_any(self, app_id: int) -> bool:
        """Whether the app holds a claim on any host (pending or verified)."""
        query = sa.select(app_domains.c.host).where(app_domains.c.app_id == app_id).limit(1)
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).first() is not None

    async def get_many(self, hosts: Iterable[str]) -> dict[str, DomainRecord]:
        names = sorted(set(hosts))
        if not names:
            return {}
        query = sa.select(app_domains).where(app_domains.c.host.in_(names))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {r.host: _record(r) for r in rows}

    async def claim(
        self, app_id: int, hosts: Iterable[str], *, stale_before: float | None = None
    ) -> dict[str, DomainRecord]:
        """Claim each free host for ``app_id`` (pending); every host's holder after it, which
        may be another app (the host was taken: nothing changes for it). Another app's pending
        claim made before ``stale_before`` has expired: it gives way, in the same transaction."""
        names = sorted(set(hosts))
        if names:
            now = time.time()
            rows: list[dict[str, object]] = [
                {"host": h, "app_id": app_id, "state": PENDING, "created_at": now} for h in names
            ]
            async with writing(self._engine) as conn:
                if stale_before is not None:  # another app's, never this one's: no refresh
                    others = self._stale(stale_before).where(
                        app_domains.c.host.in_(names), app_domains.c.app_id != app_id
                    )
                    await conn.execute(others)
                await conn.execute(self._insert_free(rows))
        return await self.get_many(names)

    @staticmethod
    def _stale(stale_before: float) -> sa.Delete:
        table = app_domains
        return sa.delete(table).where(table.c.state == PENDING, table.c.created_at < stale_before)

    async def expire(self, stale_before: float, limit: int) -> list[str]:
        """Drop at most ``limit`` pending claims made before ``stale_before`` (never proved:
        the name is free for anyone again); the hosts let go."""
        table = app_domains
        oldest = (
            sa.select(table.c.host)
            .where(table.c.state == PENDING, table.c.created_at < stale_before)
            .order_by(table.c.created_at)
            .limit(limit)
        )
        async with writing(self._engine) as conn:
            hosts = [r.host for r in (await conn.execute(oldest)).all()]
            if hosts:
                await conn.execute(self._stale(stale_before).where(table.c.host.in_(hosts)))
        return sorted(hosts)

    async def release(self, app_id: int, keep: Iterable[str] = ()) -> list[str]:
        """Drop the app's claims on every host but ``keep``; the hosts let go."""
        table = app_domains
        kept = sorted(set(keep))
        where = [table.c.app_id == app_id]
        if kept:
            where.append(table.c.host.not_in(kept))
        async with writing(self._engine) as conn:
            gone = (
                await conn.execute(sa.delete(table).where(*where).returning(table.c.host))
            ).all()
        return sorted(r.host for r in gone)

    async def verify(self, host: str, app_id: int, method: Method) -> bool:
        """Mark the app's claim on ``host`` verified by ``method``; False when it holds none.
        A TXT proof is kept as the method once made (it outranks a later ACME one)."""
        table = app_domains
        now = time.time()
        stronger = sa.case((table.c.method == "txt", "txt"), else_=method)
        statement = (
            sa.update(table)
            .where(table.c.host == host, table.c.app_id == app_id)
            .values(
                state=VERIFIED,
                method=stronger,
                verified_at=sa.func.coalesce(table.c.verified_at, now),
                checked_at=now,
                last_error=None,
                failing_since=None,
            )
        )
        async with writing(self._engine) as conn:
            return (await conn.execute(statement)).rowcount > 0

    async def take_over(self, host: str, app_id: int) -> bool:
        """Give ``host`` to ``app_id``, verified by TXT, in one transaction, unless another app
        holds it by a TXT proof of its own (then False). For a proof just made by ``app_id``'s
        owner: a pending claim or one proved only by ACME gives way to it."""
        table = app_domains
        now = time.time()
        async with writing(self._engine) as conn:
            await conn.execute(
                sa.delete(table).where(
                    table.c.host == host,
                    table.c.app_id != app_id,
                    sa.or_(table.c.method.is_(None), table.c.method != "txt"),
                )
            )
            values: dict[str, object] = {
                "host": host,
                "app_id": app_id,
                "state": PENDING,
                "created_at": now,
            }
            await conn.execute(self._insert_free([values]))
            holder = (
                await conn.execute(sa.select(table.c.app_id).where(table.c.host == host))
            ).scalar_one_or_none()
            if holder != app_id:
                return False
            await conn.execute(
                sa.update(table)
                .where(table.c.host == host)
                .values(
                    state=VERIFIED,
                    method="txt",
                    verified_at=now,
                    checked_at=now,
                    last_error=None,
                    failing_since=None,
                )
            )
        return True

    async def checked(self, host: str, app_id: int, error: str | None) -> None:
        """Note a TXT lookup of the app's claim that proved nothing (``error`` says why)."""
        table = app_domains
        statement = (
            sa.update(table)
            .where(table.c.host == host, table.c.app_id == app_id)
            .values(checked_at=time.time(), last_error=(error or "")[:MAX_ERROR] or None)
        )
        async with writing(self._engine) as conn:
            await conn.execute(statement)

    async def still_proved(self, host: str, app_id: int, error: str | None, now: float) -> None:
        """Note a re-check of a verified TXT proof: found (``error`` None: any failure is
        forgotten) or missing since its first miss (``failing_since`` kept)."""
        table = app_domains
        values: dict[str, object] = {"checked_at": now, "last_error": error}
        if error is None:
            values["failing_since"] = None
        else:
            values["last_error"] = error[:MAX_ERROR]
            values["failing_since"] = sa.func.coalesce(table.c.failing_since, now)
        statement = (
            sa.update(table)
            .where(table.c.host == host, table.c.app_id == app_id, table.c.state == VERIFIED)
            .values(**values)
        )
        async with writing(self._engine) as conn:
            await conn.execute(statement)

    async def unverify(self, host: str, app_id: int, reason: str) -> bool:
        """The verified claim's proof is gone: pending again (no longer served), ``reason``
        kept for the agent. False when the app holds no verified claim on ``host``."""
        table = app_domains
        statement = (
            sa.update(table)
            .where(table.c.host == host, table.c.app_id == app_id, table.c.state == VERIFIED)
            .values(
                state=PENDING,
                method=None,
                verified_at=None,
                failing_since=None,
                created_at=time.time(),
                last_error=reason[:MAX_ERROR],
            )
        )
        async with writing(self._engine) as conn:
            return (await conn.execute(statement)).rowcount > 0

    async def due(
        self, checked_before: float, limit: int, *, state: str = PENDING
    ) -> list[DomainRecord]:
        """Claims in ``state`` not looked at since ``checked_before``, longest-waiting first
        (verified ones: only those proved by TXT, the proof that can be looked up again)."""
        table = app_domains
        extra = [table.c.method == "txt"] if state == VERIFIED else []
        query = (
            sa.select(table)
            .where(
                table.c.state == state,
                *extra,
                sa.or_(table.c.checked_at.is_(None), table.c.checked_at < checked_before),
            )
            .order_by(sa.func.coalesce(table.c.checked_at, 0.0), table.c.host)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [_record(r) for r in (await conn.execute(query)).all()]

    async def served(self, *, verified_only: bool = True) -> list[Served]:
        """Every verified host with its app: what the data plane's host map must hold (every
        claimed one with ``verified_only=False``: what TLS may order a certificate for)."""
        query = (
            sa.select(app_domains.c.host, apps.c.id, apps.c.name, apps.c.tenant_id)
            .join(apps, apps.c.id == app_domains.c.app_id)
            .order_by(app_domains.c.host)
        )
        if verified_only:
            query = query.where(app_domains.c.state == VERIFIED)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [Served(r.host, r.id, r.name, r.tenant_id) for r in rows]
