"""Apps, app members and app environment variables (values arrive already encrypted)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from appdeck.common.errors import Conflict, FailedPrecondition, QuotaExceeded
from appdeck.storage.engine import serialized, writing
from appdeck.storage.schema import app_env, app_members, apps, deployments

_HOLDING = ("live", "queued", "building", "starting", "canary")
"""Deployments whose frozen spec an app holds: live, and in progress (``schema.IN_PROGRESS``)."""

SpecCheck = Callable[[Mapping[int, Sequence[Mapping[str, Any]]]], None]
"""Run inside the transaction that writes a spec, given per app of the tenant the specs it
holds (its own, then its live and in-progress deployments'); raises to refuse the write."""


@dataclass(frozen=True, slots=True)
class AppRecord:
    id: int
    tenant_id: str
    name: str
    description: str | None
    spec: dict[str, Any]
    spec_version: int
    created_by: str
    created_at: float
    updated_at: float
    needs_restart: bool
    stopped: bool = False
    """Stopped by its operator: kept at 0 instances, its routes answer 503 "stopped"."""
    run_intent: str | None = None
    """A stop or start asked for by the operator's CLI, not applied by a server yet."""


@dataclass(frozen=True, slots=True)
class MemberRecord:
    app_id: int
    user_id: str
    role: str
    granted_by: str
    granted_at: float


@dataclass(frozen=True, slots=True)
class EnvRecord:
    app_id: int
    name: str
    value: str  # encrypted
    secret: bool
    updated_by: str
    updated_at: float


def _app(row: Any) -> AppRecord:
    return AppRecord(
        id=int(row.id),
        tenant_id=row.tenant_id,
        name=row.name,
        description=row.description,
        spec=dict(row.spec),
        spec_version=row.spec_version,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        needs_restart=bool(row.needs_restart),
        stopped=bool(row.stopped),
        run_intent=row.run_intent,
    )


def _env(row: Any) -> EnvRecord:
    return EnvRecord(
        int(row.app_id), row.name, row.value, bool(row.secret), row.updated_by, row.updated_at
    )


_WITH_ROLE = (
    sa.select(apps, app_members.c.role.label("member_role"))
    .outerjoin(
        app_members,
        sa.and_(
            app_members.c.app_id == apps.c.id,
            app_members.c.user_id == sa.bindparam("wanted_user", type_=app_members.c.user_id.type),
        ),
    )
    .where(apps.c.id == sa.bindparam("wanted_app", type_=apps.c.id.type))
)
""":meth:`AppStore.get_with_role`'s read, built once."""


class AppStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    # -- apps -----------------------------------------------------------------------------

    async def create(
        self,
        tenant_id: str,
        name: str,
        description: str | None,
        spec: dict[str, Any],
        created_by: str,
        *,
        max_apps: int | None = None,
        check: SpecCheck | None = None,
    ) -> AppRecord:
        """Insert the app and its owner; with ``max_apps`` and ``check``, the tenant's count
        and what its apps hold are checked in the same transaction, serialized per tenant, so
        concurrent calls never overshoot."""
        now = time.time()
        try:
            async with writing(self._engine) as conn:
                if max_apps is not None or check is not None:
                    await serialized(conn, f"apps:{tenant_id}")
                if max_apps is not None:
                    count = sa.select(sa.func.count()).select_from(apps)
                    held = (await conn.execute(count.where(apps.c.tenant_id == tenant_id))).scalar()
                    if int(held or 0) >= max_apps:
                        raise QuotaExceeded(
                            f"the tenant has {max_apps} apps, the most it may have "
                            "(APPDECK_MAX_APPS_PER_TENANT)",
                            hint="delete an app you no longer need, or ask the operator to "
                            "raise APPDECK_MAX_APPS_PER_TENANT",
                            quota="apps",
                            limit=max_apps,
                            used=int(held or 0),
                            setting="APPDECK_MAX_APPS_PER_TENANT",
                        )
                if check is not None:
                    check(await _held(conn, tenant_id))
                result = await conn.execute(
                    sa.insert(apps)
                    .values(
                        tenant_id=tenant_id,
                        name=name,
                        description=description,
                        spec=spec,
                        spec_version=1,
                        created_by=created_by,
                        created_at=now,
                        updated_at=now,
                        needs_restart=False,
                    )
                    .returning(apps.c.id)
                )
                app_id = int(result.scalar_one())
                await conn.execute(
                    sa.insert(app_members).values(
                        app_id=app_id,
                        user_id=created_by,
                        role="owner",
                        granted_by=created_by,
                        granted_at=now,
                    )
                )
        except IntegrityError:
            raise Conflict(
                f"an app named {name!r} already exists", hint="pick another name"
            ) from None
        record = await self.get(app_id)
        assert record is not None
        return record

    async def get(self, app_id: int) -> AppRecord | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(apps).where(apps.c.id == app_id))).first()
        return None if row is None else _app(row)

    async def get_with_role(self, app_id: int, user_id: str) -> tuple[AppRecord, str | None] | None:
        """The app and ``user_id``'s member role on it (None: not a member), in one read:
        every tool call on an app loads it this way (a statement built once)."""
        values = {"wanted_app": app_id, "wanted_user": user_id}
        async with self._engine.connect() as conn:
            row = (await conn.execute(_WITH_ROLE, values)).first()
        return None if row is None else (_app(row), row.member_role)

    async def by_name(self, tenant_id: str, name: str) -> AppRecord | None:
        query = sa.select(apps).where(apps.c.tenant_id == tenant_id, apps.c.name == name)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _app(row)

    async def for_tenant(
        self,
        tenant_id: str,
        *,
        member: str | None,
        offset: int,
        limit: int,
        name_contains: str | None = None,
    ) -> list[tuple[AppRecord, str | None]]:
        """Apps of a tenant with the member's role (all apps when ``member`` is None)."""
        role = app_members.c.role if member is not None else sa.null()
        query = sa.select(apps, role.label("member_role")).where(apps.c.tenant_id == tenant_id)
        if member is not None:
            query = query.join(
                app_members,
                sa.and_(app_members.c.app_id == apps.c.id, app_members.c.user_id == member),
            )
        if name_contains:
            query = query.where(apps.c.name.contains(name_contains, autoescape=True))
        query = query.order_by(apps.c.id).offset(offset).limit(limit)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [(_app(r), r.member_role) for r in rows]

    async def all_apps(self) -> list[AppRecord]:
        """Every app of every tenant (start-up only)."""
        async with self._engine.connect() as conn:
            return [
                _app(r) for r in (await conn.execute(sa.select(apps).order_by(apps.c.id))).all()
            ]

    async def with_intent(self) -> list[AppRecord]:
        """The apps with a stop or start the operator's CLI asked for and no server applied
        yet (``run_intent``)."""
        query = sa.select(apps).where(apps.c.run_intent.is_not(None)).order_by(apps.c.id)
        async with self._engine.connect() as conn:
            return [_app(r) for r in (await conn.execute(query)).all()]

    async def count(self, tenant_id: str) -> int:
        query = sa.select(sa.func.count()).select_from(apps).where(apps.c.tenant_id == tenant_id)
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def update(self, app_id: int, **values: Any) -> AppRecord:
        values["updated_at"] = time.time()
        try:
            async with writing(self._engine) as conn:
                await conn.execute(sa.update(apps).where(apps.c.id == app_id).values(**values))
        except IntegrityError:
            raise Conflict(
                "an app with that name already exists", hint="pick another name"
            ) from None
        record = await self.get(app_id)
        assert record is not None
        return record

    async def held(self, tenant_id: str) -> dict[int, list[dict[str, Any]]]:
        """What each app of the tenant holds now (a dry run's look: no transaction)."""
        async with self._engine.connect() as conn:
            return await _held(conn, tenant_id)

    async def update_spec(
        self, app: AppRecord, spec: dict[str, Any], check: SpecCheck | None = None
    ) -> AppRecord:
        """Write ``spec`` as the app's next spec version; ``check`` runs first in the same
        transaction, serialized per tenant with every other spec write and app insert."""
        async with writing(self._engine) as conn:
            await serialized(conn, f"apps:{app.tenant_id}")
            if check is not None:
                check(await _held(conn, app.tenant_id))
            await conn.execute(
                sa.update(apps)
                .where(apps.c.id == app.id)
                .values(spec=spec, spec_version=apps.c.spec_version + 1, updated_at=time.time())
            )
        record = await self.get(app.id)
        assert record is not None
        return record

    async def delete(self, app_id: int) -> None:
        async with writing(self._engine) as conn:
            await conn.execute(sa.delete(deployments).where(deployments.c.app_id == app_id))
            await conn.execute(sa.delete(app_env).where(app_env.c.app_id == app_id))
            await conn.execute(sa.delete(app_members).where(app_members.c.app_id == app_id))
            await conn.execute(sa.delete(apps).where(apps.c.id == app_id))

    # -- members --------------------------------------------------------------------------

    async def member_role(self, app_id: int, user_id: str) -> str | None:
        query = sa.select(app_members.c.role).where(
            app_members.c.app_id == app_id, app_members.c.user_id == user_id
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).scalar_one_or_none()

    async def set_member(self, app_id: int, user_id: str, role: str, granted_by: str) -> None:
        """Give ``user_id`` ``role``; refused when it would leave the app without an owner."""
        async with writing(self._engine) as conn:
            await serialized(conn, f"members:{app_id}")
            if role != "owner":
                await _keep_an_owner(conn, app_id, user_id)
            await conn.execute(
                sa.delete(app_members).where(
                    app_members.c.app_id == app_id, app_members.c.user_id == user_id
                )
            )
            await conn.execute(
                sa.insert(app_members).values(
                    app_id=app_id,
                    user_id=user_id,
                    role=role,
                    granted_by=granted_by,
                    granted_at=time.time(),
                )
            )

    async def remove_member(self, app_id: int, user_id: str) -> bool:
        """Remove ``user_id``; refused when it would leave the app without an owner."""
        async with writing(self._engine) as conn:
            await serialized(conn, f"members:{app_id}")
            await _keep_an_owner(conn, app_id, user_id)
            result = await conn.execute(
                sa.delete(app_members).where(
                    app_members.c.app_id == app_id, app_members.c.user_id == user_id
                )
            )
        return bool(result.rowcount)

    async def members(self, app_id: int) -> list[MemberRecord]:
        query = (
            sa.select(app_members)
            .where(app_members.c.app_id == app_id)
            .order_by(app_members.c.granted_at)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            MemberRecord(int(r.app_id), r.user_id, r.role, r.granted_by, r.granted_at) for r in rows
        ]

    # -- environment ----------------------------------------------------------------------

    async def env(self, app_id: int) -> list[EnvRecord]:
        query = sa.select(app_env).where(app_env.c.app_id == app_id).order_by(app_env.c.name)
        async with self._engine.connect() as conn:
            return [_env(r) for r in (await conn.execute(query)).all()]

    async def set_env(self, app_id: int, items: list[tuple[str, str, bool]], by: str) -> None:
        """Upsert (name, encrypted value, secret) triples and mark the app as needing a
        restart, in one transaction."""
        now = time.time()
        async with writing(self._engine) as conn:
            names = [name for name, _, _ in items]
            if names:
                await conn.execute(
                    sa.delete(app_env).where(app_env.c.app_id == app_id, app_env.c.name.in_(names))
                )
            if items:
                await conn.execute(
                    sa.insert(app_env),
                    [
                        {
                            "app_id": app_id,
                            "name": n,
                            "value": v,
                            "secret": s,
                            "updated_by": by,
                            "updated_at": now,
                        }
                        for n, v, s in items
                    ],
                )
            await _mark_restart(conn, app_id, now)

    async def unset_env(self, app_id: int, names: list[str]) -> int:
        now = time.time()
        async with writing(self._engine) as conn:
            result = await conn.execute(
                sa.delete(app_env).where(app_env.c.app_id == app_id, app_env.c.name.in_(names))
            )
            if result.rowcount:
                await _mark_restart(conn, app_id, now)
        return int(result.rowcount)


async def _keep_an_owner(conn: AsyncConnection, app_id: int, leaving: str) -> None:
    """Raise if ``leaving`` is the app's only owner (read under the caller's lock)."""
    query = sa.select(app_members.c.user_id).where(
        app_members.c.app_id == app_id, app_members.c.role == "owner"
    )
    owners = set((await conn.execute(query)).scalars())
    if owners == {leaving}:
        raise FailedPrecondition(
            "an app keeps at least one owner", hint="grant owner to someone else first"
        )


async def _mark_restart(conn: AsyncConnection, app_id: int, now: float) -> None:
    """The env changed: a running release has the old one. Before the first deploy nothing
    runs, so nothing needs a restart (preflight said "env changed since the last deploy" for
    an app never deployed)."""
    running = sa.exists().where(
        deployments.c.app_id == app_id,
        deployments.c.state.in_(("queued", "building", "starting", "canary", "live")),
    )
    await conn.execute(
        sa.update(apps)
        .where(apps.c.id == app_id)
        .values(needs_restart=sa.case((running, True), else_=False), updated_at=now)
    )


async def _held(conn: AsyncConnection, tenant_id: str) -> dict[int, list[dict[str, Any]]]:
    """Per app of the tenant, its spec and the frozen specs of its live and in-progress
    deployments (what it holds, or may hold again once a deploy under way is done): one
    query, the app's own spec first."""
    own = sa.select(apps.c.id.label("app_id"), apps.c.spec, sa.literal(0).label("o")).where(
        apps.c.tenant_id == tenant_id
    )
    running = (
        sa.select(deployments.c.app_id, deployments.c.spec, sa.literal(1).label("o"))
        .join(apps, apps.c.id == deployments.c.app_id)
        .where(apps.c.tenant_id == tenant_id, deployments.c.state.in_(_HOLDING))
    )
    both = sa.union_all(own, running).subquery()
    query = sa.select(both.c.app_id, both.c.spec).order_by(both.c.app_id, both.c.o)
    held: dict[int, list[dict[str, Any]]] = {}
    for row in await conn.execute(query):
        held.setdefault(int(row.app_id), []).append(dict(row.spec))
    return held
