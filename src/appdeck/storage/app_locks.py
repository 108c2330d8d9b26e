"""Per-app leases in the database: one deploy, rollback or restart of an app at a time,
whichever replica runs it.

A lease is a row of ``app_locks`` (``app_id``, ``holder``, ``fence``, ``expires_at``). It is
taken with one conditional upsert: when the row is free (absent or expired) or already the
taker's. Taking it from another holder adds 1 to ``fence``; the fence never goes down (a
release only expires the row), so a stale holder's number is never handed out again.

Every write a holder makes while it holds the lease carries :func:`guard` (``EXISTS`` the row
with its holder and fence, unexpired): a holder that was paused past its lease, or lost it to
a takeover, has its writes refused by the database itself, not by its own idea of the time.

Times are the database's clock (epoch seconds), never the replicas': their clocks may differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.schema import app_locks

MAX_HOLDER = 200
"""A holder names a replica and what it is doing: short."""


class Fenced(RuntimeError):
    """A write carrying a lease was refused: the lease expired or another holder took it.
    Whoever holds it now owns the app; the refused writer stops writing."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as last taken or renewed (``expires_at`` on the database's clock)."""

    app_id: int
    holder: str
    fence: int
    expires_at: float


def db_now(dialect: str) -> sa.ColumnElement[float]:
    """The database's clock, epoch seconds, as an SQL expression."""
    if dialect == "postgresql":
        return sa.cast(sa.func.extract("epoch", sa.func.clock_timestamp()), sa.Double)
    # SQLite (one process): julianday has millisecond resolution
    return sa.cast((sa.func.julianday("now") - 2440587.5) * 86400.0, sa.Double)


def guard(lease: Lease, dialect: str) -> sa.ColumnElement[bool]:
    """``EXISTS`` the lease, unexpired: add it to the WHERE of every write made under it."""
    return sa.exists().where(
        app_locks.c.app_id == lease.app_id,
        app_locks.c.holder == lease.holder,
        app_locks.c.fence == lease.fence,
        app_locks.c.expires_at > db_now(dialect),
    )


def _is_lease() -> tuple[sa.ColumnElement[bool], ...]:
    """The row is the lease of :func:`guard_values`' parameters (expired or not)."""
    c = app_locks.c
    return (
        c.app_id == sa.bindparam("lease_app_id", type_=c.app_id.type),
        c.holder == sa.bindparam("lease_holder", type_=c.holder.type),
        c.fence == sa.bindparam("lease_fence", type_=c.fence.type),
    )


def guard_clause(dialect: str) -> sa.ColumnElement[bool]:
    """:func:`guard` with its lease as bound parameters, for a statement built once and run
    with :func:`guard_values`."""
    return sa.exists().where(*_is_lease(), app_locks.c.expires_at > db_now(dialect))


def guard_values(lease: Lease) -> dict[str, Any]:
    """The parameters of :func:`guard_clause` for ``lease``."""
    return {"lease_app_id": lease.app_id, "lease_holder": lease.holder, "lease_fence": lease.fence}


RELEASE: sa.Update = sa.update(app_locks).where(*_is_lease()).values(expires_at=0.0)
"""Let the lease of :func:`guard_values`' parameters go (it expires now; the fence stays),
built once: run by :meth:`AppLockStore.release`, or inside the transaction of a holder's
last write (:meth:`appdeck.storage.deployments.DeploymentStore.move_together`)."""


def _lease(row: Any) -> Lease:
    return Lease(int(row.app_id), str(row.holder), int(row.fence), float(row.expires_at))


_RETURNED = (app_locks.c.app_id, app_locks.c.holder, app_locks.c.fence, app_locks.c.expires_at)


class _Statements:
    """The lease's statements for one dialect, built once: a take is the hot path of every
    deploy, rollback and restart, and building a statement (then its cache key) cost more
    than running it. Each runs with its parameters as a dict."""

    def __init__(self, dialect: str) -> None:
        now = db_now(dialect)
        holder = sa.bindparam("taker", type_=app_locks.c.holder.type)
        until = now + sa.bindparam("ttl", type_=sa.Double)
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        self.acquire = (
            insert(app_locks)
            .values(
                app_id=sa.bindparam("app", type_=app_locks.c.app_id.type),
                holder=holder,
                fence=1,
                expires_at=until,
            )
            .on_conflict_do_update(
                index_elements=[app_locks.c.app_id],
                set_={
                    "holder": holder,
                    "fence": sa.case(
                        (app_locks.c.holder == holder, app_locks.c.fence),
                        else_=app_locks.c.fence + 1,
                    ),
                    "expires_at": until,
                },
                where=sa.or_(app_locks.c.holder == holder, app_locks.c.expires_at <= now),
            )
            .returning(*_RETURNED)
        )
        mine = _is_lease()
        self.renew = (
            sa.update(app_locks)
            .where(*mine, app_locks.c.expires_at > now)
            .values(expires_at=until)
            .returning(*_RETURNED)
        )


class AppLockStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self.dialect = engine.dialect.name
        self._statements = _Statements(self.dialect)

    def guard(self, lease: Lease) -> sa.ColumnElement[bool]:
        return guard(lease, self.dialect)

    async def acquire(self, app_id: int, holder: str, ttl: float) -> Lease | None:
        """Take (or keep) the app's lease for ``ttl`` seconds: granted when nobody holds it,
        its holder let it expire, or ``holder`` holds it already. ``None``: someone else
        holds it."""
        if not holder or len(holder) > MAX_HOLDER:
            raise ValueError("a holder is 1..200 characters")
        if not ttl > 0:
            raise ValueError("a lease lasts a positive time")
        values = {"app": app_id, "taker": holder, "ttl": float(ttl)}
        async with self._engine.begin() as conn:
            row = (await conn.execute(self._statements.acquire, values)).first()
        return None if row is None else _lease(row)

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a lease still held (unexpired, same holder and fence); ``None``: it is
        lost, and its holder must stop writing."""
        values = {**guard_values(lease), "ttl": float(ttl)}
        async with self._engine.begin() as conn:
            row = (await conn.execute(self._statements.renew, values)).first()
        return None if row is None else _lease(row)

    async def release(self, lease: Lease) -> bool:
        """Let the lease go (it expires now; the fence stays, so it only grows). False when
        it was no longer this holder's."""
        async with self._engine.begin() as conn:
            done = await conn.execute(RELEASE, guard_values(lease))
        return bool(done.rowcount)

    async def expire_others(self, instance_id: str) -> int:
        """Let go of every lease not held by ``instance_id`` (holders ``<instance>:...``):
        for a process that knows it is the only one (the embedded default), whose earlier
        runs left leases behind. Never in replica mode. Returns how many it let go."""
        statement = (
            sa.update(app_locks)
            .where(
                sa.not_(app_locks.c.holder.startswith(f"{instance_id}:", autoescape=True)),
                app_locks.c.expires_at > db_now(self.dialect),
            )
            .values(expires_at=0.0)
        )
        async with self._engine.begin() as conn:
            done = await conn.execute(statement)
        return int(done.rowcount)

    async def get(self, app_id: int) -> Lease | None:
        """The app's lease row, held or not (``expires_at`` tells)."""
        query = sa.select(app_locks).where(app_locks.c.app_id == app_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _lease(row)

    async def held(self, lease: Lease) -> bool:
        """Whether ``lease`` is still held (unexpired, same holder and fence)."""
        async with self._engine.connect() as conn:
            found = await conn.execute(sa.select(self.guard(lease)))
        return bool(found.scalar())

    async def now(self) -> float:
        """The database's clock."""
        async with self._engine.connect() as conn:
            return float((await conn.execute(sa.select(db_now(self.dialect)))).scalar_one())
