"""Which server processes are alive: a heartbeat per replica, on the database's clock.

Each replica writes ``replicas.heartbeat_at`` every :data:`HEARTBEAT_SECONDS`; a replica whose
heartbeat is older than :data:`DEAD_AFTER_SECONDS` is dead, and the others take over what it
ran (its tasks are swept by :meth:`appdeck.protocol.tasks.TaskManager.sweep`). Every time is
read from the database in the statement that uses it, so the replicas' own clocks never
matter. A clean shutdown deletes the row (:meth:`ReplicaStore.remove`): the others then take
over at once instead of after the dead delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.schema import replicas

HEARTBEAT_SECONDS: Final = 2.0
DEAD_AFTER_SECONDS: Final = 10.0
FORGET_AFTER_SECONDS: Final = 3_600.0
"""A row whose heartbeat is this old is deleted (a replica killed without a clean stop)."""
MAX_REPLICAS: Final = 10_000
"""At most this many live replicas are read back (a bound, not a limit anyone reaches)."""

log = logging.getLogger("appdeck.replicas")


def database_now(engine: AsyncEngine | sa.Dialect) -> sa.ColumnElement[Any]:
    """The database's current time in epoch seconds (a float), for a statement's WHERE or
    VALUES: PostgreSQL's ``statement_timestamp()``, SQLite's ``julianday('now')``."""
    dialect = engine.dialect if isinstance(engine, AsyncEngine) else engine
    if dialect.name == "postgresql":
        return sa.cast(sa.func.extract("epoch", sa.func.statement_timestamp()), sa.Double)
    return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)", sa.Double)


def live_condition(
    instance: sa.ColumnElement[Any], engine: AsyncEngine, dead_after: float
) -> sa.ColumnElement[bool]:
    """True when ``instance`` (an instance id column or value) has a fresh heartbeat."""
    return sa.exists().where(
        replicas.c.instance_id == instance,
        replicas.c.heartbeat_at > database_now(engine) - dead_after,
    )


class ReplicaStore:
    """This replica's heartbeat, and who else is alive."""

    def __init__(
        self,
        engine: AsyncEngine,
        instance_id: str,
        *,
        interval: float = HEARTBEAT_SECONDS,
        dead_after: float = DEAD_AFTER_SECONDS,
    ) -> None:
        self._engine = engine
        self.instance_id = instance_id
        self.interval = interval
        self.dead_after = dead_after
        self.beats_ok = 0
        """Heartbeats :meth:`beat_forever` wrote, and (below) failed to write (for metrics)."""
        self.beats_failed = 0
        self.peers: int | None = None
        """Replicas alive at the last heartbeat, this one included (None before the first)."""

    async def heartbeat(self) -> None:
        """Say this replica is alive now (on the database's clock), and count the live ones
        (:attr:`peers`). Only this replica writes its own row, so update-then-insert needs no
        upsert."""
        now = database_now(self._engine)
        alive = (
            sa.select(sa.func.count())
            .select_from(replicas)
            .where(replicas.c.heartbeat_at > now - self.dead_after)
        )
        async with self._engine.begin() as conn:
            updated = await conn.execute(
                sa.update(replicas)
                .where(replicas.c.instance_id == self.instance_id)
                .values(heartbeat_at=now)
            )
            if updated.rowcount == 0:
                await conn.execute(
                    sa.insert(replicas).values(
                        instance_id=self.instance_id, started_at=now, heartbeat_at=now
                    )
                )
            self.peers = int(await conn.scalar(alive) or 0)

    async def live(self) -> set[str]:
        """The instance ids whose heartbeat is fresher than the dead delay."""
        query = (
            sa.select(replicas.c.instance_id)
            .where(replicas.c.heartbeat_at > database_now(self._engine) - self.dead_after)
            .limit(MAX_REPLICAS)
        )
        async with self._engine.connect() as conn:
            return set((await conn.scalars(query)).all())

    async def remove(self) -> None:
        """Clean shutdown: this replica is gone now (the others sweep its tasks at once)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.delete(replicas).where(replicas.c.instance_id == self.instance_id)
            )

    async def forget_dead(self, older_than: float = FORGET_AFTER_SECONDS) -> int:
        """Delete the rows of replicas silent for ``older_than`` seconds; returns how many."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.delete(replicas).where(
                    replicas.c.heartbeat_at < database_now(self._engine) - older_than
                )
            )
        return result.rowcount

    async def beat_forever(self, stopping: asyncio.Event) -> None:
        """Heartbeat every :attr:`interval` until ``stopping`` is set; forget long-dead rows
        about once a minute. A failed write is logged and retried at the next beat (a replica
        that cannot reach the database for the dead delay is, rightly, taken for dead)."""
        beats = 0
        while not stopping.is_set():
            try:
                await self.heartbeat()
            except Exception:  # the database may be down for a while; keep beating
                self.beats_failed += 1
                log.exception("replica heartbeat failed")
            else:
                self.beats_ok += 1
                if beats % max(1, round(60 / self.interval)) == 0:
                    await self._forget_dead_quietly()
            beats += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await stopping.wait()

    async def _forget_dead_quietly(self) -> None:
        try:
            await self.forget_dead()
        except Exception:  # tried again in a minute
            log.exception("forgetting dead replicas failed")
