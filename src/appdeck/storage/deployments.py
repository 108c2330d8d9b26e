"""Deployments in the database: each state change and step is written as it happens."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from appdeck.common.errors import Conflict
from appdeck.storage.app_locks import RELEASE, Fenced, Lease, guard, guard_clause, guard_values
from appdeck.storage.engine import writing
from appdeck.storage.schema import deployments

_IN_PROGRESS: Final = ("queued", "building", "starting", "canary")
"""``platform.deploy.states.IN_PROGRESS``: the states of ``schema.IN_PROGRESS``, the partial
unique index ``uq_deployments_in_progress``."""

MAX_NUMBER: Final = 2**31 - 1
"""Deployment numbers (and CI run numbers) are INTEGER columns: nothing lies beyond."""


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    app_id: int
    number: int
    state: str
    strategy: str
    spec: dict[str, Any]
    env: str  # sealed
    source: dict[str, Any]
    created_by: str
    created_at: float
    updated_at: float
    status_message: str | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    previous: int | None = None
    traffic: int = 0
    instance_id: str | None = None

    @property
    def release_id(self) -> str:
        return f"{self.app_id}-{self.number}"

    def public(self) -> dict[str, Any]:
        """What a caller may see (never the env)."""
        return {
            "app_id": self.app_id,
            "number": self.number,
            "state": self.state,
            "strategy": self.strategy,
            "traffic_percent": self.traffic,
            "status_message": self.status_message,
            "previous": self.previous,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "steps": self.steps,
            "source": self._shown_source(),
        }

    def _shown_source(self) -> dict[str, Any]:
        """A git source's checkout lives in the data dir: its path is not the caller's."""
        if self.source.get("kind") != "git":
            return self.source
        return {k: v for k, v in self.source.items() if k != "path"}


@dataclass(frozen=True, slots=True)
class DeploymentBrief:
    """What a list of apps shows of a deployment."""

    app_id: int
    number: int
    state: str
    strategy: str
    created_at: float
    updated_at: float
    status_message: str | None


def _record(row: Any) -> DeploymentRecord:
    return DeploymentRecord(
        app_id=int(row.app_id),
        number=int(row.number),
        state=row.state,
        strategy=row.strategy,
        spec=dict(row.spec),
        env=row.env,
        source=dict(row.source),
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        status_message=row.status_message,
        steps=list(row.steps),
        previous=row.previous,
        traffic=int(row.traffic),
        instance_id=row.instance_id,
    )


@dataclass(frozen=True, slots=True)
class Move:
    """One deployment's new state in :meth:`DeploymentStore.move_together`."""

    number: int
    state: str
    message: str
    traffic: int


class _MoveStatements:
    """:meth:`DeploymentStore.move_together`'s update, built once per dialect (building it,
    with the lease's guard, cost more than running it): compare-and-set on the state
    (``by_state``), or on the state and ``updated_at`` as the caller read them
    (``as_read``), under the lease; the row written is returned."""

    def __init__(self, dialect: str) -> None:
        c = deployments.c
        where = (
            c.app_id == sa.bindparam("m_app", type_=c.app_id.type),
            c.number == sa.bindparam("m_number", type_=c.number.type),
            c.state == sa.bindparam("m_was", type_=c.state.type),
            guard_clause(dialect),
        )
        update = (
            sa.update(deployments)
            .values(
                state=sa.bindparam("m_state", type_=c.state.type),
                status_message=sa.bindparam("m_message", type_=c.status_message.type),
                traffic=sa.bindparam("m_traffic", type_=c.traffic.type),
                steps=sa.bindparam("m_steps", type_=c.steps.type),
                updated_at=sa.bindparam("m_now", type_=c.updated_at.type),
            )
            .returning(*c)
        )
        self.by_state = update.where(*where)
        as_read = c.updated_at == sa.bindparam("m_updated", type_=c.updated_at.type)
        self.as_read = update.where(*where, as_read)


def _live_and(wanted: Any) -> sa.Select[Any]:
    c = deployments.c
    app = sa.bindparam("la_app", type_=c.app_id.type)
    return (
        sa.select(deployments)
        .where(c.app_id == app, sa.or_(c.state == "live", c.number == wanted))
        .order_by(c.number.desc())
    )


_LIVE_AND_NUMBER = _live_and(sa.bindparam("la_number", type_=deployments.c.number.type))
_LIVE_AND_PREVIOUS = _live_and(
    sa.select(deployments.c.previous)
    .where(
        deployments.c.app_id == sa.bindparam("la_app", type_=deployments.c.app_id.type),
        deployments.c.state == "live",
    )
    .order_by(deployments.c.number.desc())
    .limit(1)
    .scalar_subquery()
)
""":meth:`DeploymentStore.live_and`'s reads (a number asked for; the live one's previous),
built once."""


class StaleState(RuntimeError):
    """A deployment's state changed between reading it and writing the next one (another
    writer moved it): the write did not happen."""


class InProgress(Conflict):
    """The app already has a deployment in progress (the partial unique index
    ``uq_deployments_in_progress`` refused a second one, whatever replica raced)."""


class DeploymentStore:
    """Deployments, one row each. ``transitions(current, target)`` is the state machine's
    rule (``platform.deploy.states.check``): every state change is checked against it here,
    where it is stored, and written only if the row is still in the state it was checked
    from (compare-and-set)."""

    def __init__(
        self, engine: AsyncEngine, *, transitions: Callable[[str, str], None] | None = None
    ) -> None:
        self._engine = engine
        self._transitions = transitions
        self._moves = _MoveStatements(engine.dialect.name)

    @property
    def engine(self) -> AsyncEngine:
        """The database (the app locks that fence this store's writes live there too)."""
        return self._engine

    async def create(
        self,
        *,
        app_id: int,
        strategy: str,
        spec: dict[str, Any],
        env: str,
        source: dict[str, Any],
        created_by: str,
        previous: int | None,
        instance_id: str,
        state: str,
    ) -> DeploymentRecord:
        now = time.time()
        for _ in range(5):  # a concurrent create took the number: take the next one
            try:
                async with self._engine.begin() as conn:
                    top = await conn.execute(
                        sa.select(sa.func.max(deployments.c.number)).where(
                            deployments.c.app_id == app_id
                        )
                    )
                    number = int(top.scalar() or 0) + 1
                    await conn.execute(
                        sa.insert(deployments).values(
                            app_id=app_id,
                            number=number,
                            state=state,
                            strategy=strategy,
                            spec=spec,
                            env=env,
                            source=source,
                            created_by=created_by,
                            created_at=now,
                            updated_at=now,
                            status_message="Queued",
                            steps=[{"at": now, "state": state, "message": "Queued"}],
                            previous=previous,
                            traffic=0,
                            instance_id=instance_id,
                        )
                    )
            except IntegrityError:
                running = await self.for_app(app_id, states=_IN_PROGRESS, limit=1)
                if running and state in _IN_PROGRESS:
                    raise InProgress(
                        f"deployment {running[0].number} of this app is still {running[0].state}",
                        hint="wait for it (list_deployments) before deploying again",
                    ) from None
                continue  # a concurrent create took the number
            record = await self.get(app_id, number)
            assert record is not None
            return record
        raise Conflict("could not number the deployment; try again")

    async def get(self, app_id: int, number: int) -> DeploymentRecord | None:
        if not 0 < number <= MAX_NUMBER:  # the column is 32-bit: nothing out there
            return None
        query = sa.select(deployments).where(
            deployments.c.app_id == app_id, deployments.c.number == number
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _record(row)

    async def for_app(
        self, app_id: int, *, states: Iterable[str] | None = None, offset: int = 0, limit: int = 50
    ) -> list[DeploymentRecord]:
        query = sa.select(deployments).where(deployments.c.app_id == app_id)
        if states is not None:
            query = query.where(deployments.c.state.in_(list(states)))
        query = query.order_by(deployments.c.number.desc()).offset(offset).limit(limit)
        async with self._engine.connect() as conn:
            return [_record(r) for r in (await conn.execute(query)).all()]

    async def live_and(
        self, app_id: int, number: int | None
    ) -> tuple[DeploymentRecord | None, DeploymentRecord | None]:
        """The app's live deployment and deployment ``number`` (None: the one the live one
        replaced, its ``previous``), in one read (a rollback's)."""
        values = {"la_app": app_id}
        if number is None:
            query = _LIVE_AND_PREVIOUS
        else:
            query = _LIVE_AND_NUMBER
            values["la_number"] = number if 0 < number <= MAX_NUMBER else -1  # 32-bit column
        async with self._engine.connect() as conn:
            found = [_record(r) for r in (await conn.execute(query, values)).all()]
        current = next((r for r in found if r.state == "live"), None)
        if number is None:
            number = current.previous if current is not None else None
        return current, next((r for r in found if r.number == number), None)

    async def live_for(self, app_ids: Iterable[int]) -> dict[int, DeploymentRecord]:
        """The live deployment of each of ``app_ids`` that has one, in one query."""
        wanted = sorted(set(app_ids))
        if not wanted:
            return {}
        query = sa.select(deployments).where(
            deployments.c.app_id.in_(wanted), deployments.c.state == "live"
        )
        async with self._engine.connect() as conn:
            return {r.app_id: r for r in map(_record, (await conn.execute(query)).all())}

    async def latest_for(self, app_ids: Iterable[int]) -> dict[int, DeploymentBrief]:
        """The newest deployment of each of ``app_ids`` that has one, briefly (no spec, env,
        source or steps: a list shows a number, a state and a time), in one query."""
        wanted = sorted(set(app_ids))
        if not wanted:
            return {}
        c = deployments.c
        newest = (
            sa.select(c.app_id, sa.func.max(c.number).label("number"))
            .where(c.app_id.in_(wanted))
            .group_by(c.app_id)
            .subquery()
        )
        query = sa.select(
            c.app_id, c.number, c.state, c.strategy, c.created_at, c.updated_at, c.status_message
        ).join(newest, sa.and_(c.app_id == newest.c.app_id, c.number == newest.c.number))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {
            int(r.app_id): DeploymentBrief(
                int(r.app_id),
                int(r.number),
                r.state,
                r.strategy,
                r.created_at,
                r.updated_at,
                r.status_message,
            )
            for r in rows
        }

    async def in_states(self, states: Iterable[str]) -> list[DeploymentRecord]:
        """Across all apps (start-up reconciliation and route rebuilding)."""
        query = sa.select(deployments).where(deployments.c.state.in_(list(states)))
        async with self._engine.connect() as conn:
            return [
                _record(r) for r in (await conn.execute(query.order_by(deployments.c.app_id))).all()
            ]

    async def update(
        self,
        app_id: int,
        number: int,
        *,
        state: str | None = None,
        message: str | None = None,
        traffic: int | None = None,
        instance_id: str | None = None,
        lease: Lease | None = None,
        spec: dict[str, Any] | None = None,
        env: str | None = None,
    ) -> DeploymentRecord:
        """Write a step: the new state and/or message (appended to the history) and traffic
        (``spec``: the release's frozen spec, changed only by a scale of the live release;
        ``env``: its frozen env, sealed, changed only by a restart of the live release).

        With ``lease`` (the app's, :mod:`appdeck.storage.app_locks`) the write happens only
        while the lease is still held: else :class:`Fenced`, and nothing was written."""
        current = await self.get(app_id, number)
        assert current is not None
        now = time.time()
        values: dict[str, Any] = {"updated_at": now}
        if state is not None:
            values["state"] = state
        if message is not None:
            values["status_message"] = message[:2000]
        if traffic is not None:
            values["traffic"] = traffic
        if instance_id is not None:
            values["instance_id"] = instance_id
        if spec is not None:
            values["spec"] = spec
        if env is not None:
            values["env"] = env
        if state is not None or message is not None:
            step = {"at": now, "state": state or current.state, "message": (message or "")[:500]}
            values["steps"] = [*current.steps, step][-100:]
        query = sa.update(deployments).where(
            deployments.c.app_id == app_id, deployments.c.number == number
        )
        if lease is not None and lease.app_id != app_id:
            raise ValueError(f"the lease of app {lease.app_id} guards no write to {app_id}")
        if state is not None and state != current.state:
            if self._transitions is not None:
                try:
                    self._transitions(current.state, state)
                except RuntimeError:  # states.IllegalTransition
                    await self._refuse_if_fenced(lease)  # whoever took over moved it: theirs
                    raise
            query = query.where(deployments.c.state == current.state)
        if lease is not None:
            query = query.where(guard(lease, self._engine.dialect.name))
        async with self._engine.begin() as conn:
            done = await conn.execute(query.values(**values))
        if done.rowcount == 0:
            await self._refuse_if_fenced(lease)
            raise StaleState(f"deployment {app_id}-{number} changed state while being updated")
        record = await self.get(app_id, number)
        assert record is not None
        return record

    async def move_together(
        self,
        app_id: int,
        moves: Sequence[Move],
        *,
        lease: Lease,
        known: Iterable[DeploymentRecord] = (),
        let_go: bool = False,
    ) -> list[DeploymentRecord]:
        """Write each of ``moves`` (a state, a message appended to the history, the traffic)
        in one transaction under the app's ``lease``: all of them or none (a rollback's two
        records: a crash never leaves two live releases, or none). Each state change is
        checked as :meth:`update` checks it, and compare-and-set on the state it was checked
        from; :class:`Fenced` or :class:`StaleState` when a row refused it, and nothing was
        written. The records as written, in the order of ``moves``.

        ``known``: the records as the caller read them (a rollback read both under the
        lease). A row still as read (its state and ``updated_at``, which every write of a
        deployment sets, unchanged) is written from that read, in one statement; any other
        (or one whose state as read cannot make the move) is read again inside the
        transaction first, as it would be without ``known``.

        ``let_go``: the lease is let go in the same transaction (the holder's last write: one
        commit, not two); when the moves are refused, it is still held."""
        if lease.app_id != app_id:
            raise ValueError(f"the lease of app {lease.app_id} guards no write to {app_id}")
        read = {record.number: record for record in known if record.app_id == app_id}
        now = time.time()
        fenced = guard_values(lease)
        written: list[DeploymentRecord] = []
        async with writing(self._engine) as conn:  # SQLite: the write lock before the read
            current: dict[int, DeploymentRecord] | None = None
            for move in moves:
                row = None
                was = read.get(move.number)
                if was is not None and self._legal(was.state, move.state):  # written if as read
                    row = await self._move(conn, move, was, now, fenced, as_read=True)
                if row is None:
                    if current is None:  # the rows not as read, read here, once
                        current = await self._current(conn, app_id, [m.number for m in moves])
                    was = current.get(move.number)
                    if was is None:
                        raise StaleState(f"deployment {app_id}-{move.number} is gone")
                    try:
                        row = await self._move(conn, move, was, now, fenced, as_read=False)
                    except RuntimeError:  # states.IllegalTransition, maybe after a takeover
                        await _refuse_if_lost(conn, lease)
                        raise
                if row is None:
                    await _refuse_if_lost(conn, lease)
                    raise StaleState(f"deployment {app_id}-{move.number} changed state meanwhile")
                written.append(_record(row))
            if let_go:
                await conn.execute(RELEASE, fenced)
        return written

    def _legal(self, current: str, target: str) -> bool:
        """Whether ``transitions`` allows ``current`` -> ``target`` (a known record whose
        state as read does not allow the move is read again: it may have moved since)."""
        if current == target or self._transitions is None:
            return True
        try:
            self._transitions(current, target)
        except RuntimeError:  # states.IllegalTransition
            return False
        return True

    async def _current(
        self, conn: AsyncConnection, app_id: int, numbers: list[int]
    ) -> dict[int, DeploymentRecord]:
        c = deployments.c
        query = sa.select(deployments).where(c.app_id == app_id, c.number.in_(numbers))
        return {r.number: r for r in map(_record, (await conn.execute(query)).all())}

    async def _move(
        self,
        conn: AsyncConnection,
        move: Move,
        was: DeploymentRecord,
        now: float,
        fenced: dict[str, Any],
        *,
        as_read: bool,
    ) -> Any:
        """One of :meth:`move_together`'s writes, from ``was``: the row written (returned),
        or None when the row was no longer ``was``'s state (``as_read``: or ``updated_at``)
        or the lease no longer held."""
        if move.state != was.state and self._transitions is not None:
            self._transitions(was.state, move.state)
        step = {"at": now, "state": move.state, "message": move.message[:500]}
        values = {
            **fenced,
            "m_app": was.app_id,
            "m_number": move.number,
            "m_was": was.state,
            "m_state": move.state,
            "m_message": move.message[:2000],
            "m_traffic": move.traffic,
            "m_steps": [*was.steps, step][-100:],
            "m_now": now,
        }
        if as_read:
            statement, values["m_updated"] = self._moves.as_read, was.updated_at
        else:
            statement = self._moves.by_state
        return (await conn.execute(statement, values)).first()

    async def _refuse_if_fenced(self, lease: Lease | None) -> None:
        """:class:`Fenced` when ``lease`` is no longer held: a write that its record's state
        refuses (another replica took the app over and moved it) is refused for the lease,
        the cause, and the takeover's write stands."""
        if lease is not None and not await self._holds(lease):
            raise Fenced(f"app {lease.app_id}: the lease fenced {lease.fence} is no longer held")

    async def _holds(self, lease: Lease) -> bool:
        async with self._engine.connect() as conn:
            found = await conn.execute(sa.select(guard(lease, self._engine.dialect.name)))
        return bool(found.scalar())


async def _refuse_if_lost(conn: AsyncConnection, lease: Lease) -> None:
    """:class:`Fenced` when ``lease`` is no longer held, as seen inside ``conn``'s transaction
    (a move refused by its row or its state after a takeover is refused for the lease)."""
    if not (await conn.execute(sa.select(guard(lease, conn.dialect.name)))).scalar():
        raise Fenced(f"app {lease.app_id}: the lease fenced {lease.fence} is no longer held")
