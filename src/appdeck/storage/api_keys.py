"""API keys of the apps (``api_keys``): the keys the ingress checks for an app whose spec says
``api_auth: required``.

A key's value is never stored: only its SHA-256 (``key_hash``, unique) and its first
characters (``prefix``, shown in lists). A key is *active* while it is neither revoked nor
expired. The limit on active keys per app is checked in the insert's own transaction (under a
per-app lock), and revoking or rotating is one conditional ``UPDATE … WHERE revoked_at IS
NULL`` whose row count decides, so two callers racing on one key cannot both win, on SQLite
and on PostgreSQL alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from appdeck.common.errors import Conflict, QuotaExceeded
from appdeck.storage.engine import serialized, writing
from appdeck.storage.schema import api_keys, apps

__all__ = ["ApiKeyRow", "ApiKeyStore", "KeyStatus", "RequiringApp"]

KeyStatus = Literal["active", "expired", "revoked"]


@dataclass(frozen=True, slots=True)
class ApiKeyRow:
    id: str
    app_id: int
    name: str
    prefix: str
    key_hash: str
    scopes: tuple[str, ...]
    created_by: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    last_used_at: float | None = None
    rotated_from: str | None = None

    def status(self, now: float) -> KeyStatus:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True, slots=True)
class RequiringApp:
    """An app whose current spec says ``api_auth: required``."""

    app_id: int
    name: str
    tenant_id: str


def _row(row: Any) -> ApiKeyRow:
    return ApiKeyRow(
        id=row.id,
        app_id=int(row.app_id),
        name=row.name,
        prefix=row.prefix,
        key_hash=row.key_hash,
        scopes=tuple(row.scopes or ()),
        created_by=row.created_by,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
        rotated_from=row.rotated_from,
    )


def _values(key: ApiKeyRow) -> dict[str, Any]:
    return {
        "id": key.id,
        "app_id": key.app_id,
        "name": key.name,
        "prefix": key.prefix,
        "key_hash": key.key_hash,
        "scopes": list(key.scopes),
        "created_by": key.created_by,
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "revoked_at": key.revoked_at,
        "last_used_at": key.last_used_at,
        "rotated_from": key.rotated_from,
    }


def _active(now: float) -> sa.ColumnElement[bool]:
    return sa.and_(
        api_keys.c.revoked_at.is_(None),
        sa.or_(api_keys.c.expires_at.is_(None), api_keys.c.expires_at > now),
    )


class ApiKeyStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def insert(self, key: ApiKeyRow, *, max_active: int, now: float) -> None:
        """Store a new key; :class:`QuotaExceeded` when its app already has ``max_active``
        active keys (counted in the insert's transaction)."""
        try:
            async with writing(self._engine) as conn:
                await serialized(conn, f"api_keys:{key.app_id}")
                await self._room(conn, key.app_id, max_active, now)
                await conn.execute(sa.insert(api_keys).values(_values(key)))
        except IntegrityError:  # a random id or hash met another: never in practice
            raise Conflict("that API key exists already", hint="call again") from None

    async def rotate(
        self, old_id: str, new: ApiKeyRow, *, max_active: int, now: float
    ) -> ApiKeyRow | None:
        """Revoke ``old_id`` at ``now`` and store ``new`` (its replacement), in one
        transaction. None (and nothing stored) when ``old_id`` was revoked already."""
        try:
            async with writing(self._engine) as conn:
                await serialized(conn, f"api_keys:{new.app_id}")
                revoked = await conn.execute(
                    sa.update(api_keys)
                    .where(
                        api_keys.c.id == old_id,
                        api_keys.c.app_id == new.app_id,
                        api_keys.c.revoked_at.is_(None),
                    )
                    .values(revoked_at=now)
                )
                if revoked.rowcount != 1:
                    return None
                await self._room(conn, new.app_id, max_active, now)  # the old one is out now
                await conn.execute(sa.insert(api_keys).values(_values(new)))
        except IntegrityError:
            raise Conflict("that API key exists already", hint="call again") from None
        return await self.get(old_id)

    async def _room(self, conn: AsyncConnection, app_id: int, max_active: int, now: float) -> None:
        count = sa.select(sa.func.count()).where(api_keys.c.app_id == app_id, _active(now))
        if int((await conn.execute(count)).scalar_one()) >= max_active:
            raise QuotaExceeded(
                f"an app has at most {max_active} active API keys",
                hint="revoke one you no longer use (manage_api_key list shows them)",
            )

    async def get(self, key_id: str) -> ApiKeyRow | None:
        query = sa.select(api_keys).where(api_keys.c.id == key_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _row(row)

    async def for_app(self, app_id: int, *, offset: int, limit: int) -> list[ApiKeyRow]:
        """The app's keys, newest first (revoked and expired ones included)."""
        query = (
            sa.select(api_keys)
            .where(api_keys.c.app_id == app_id)
            .order_by(api_keys.c.created_at.desc(), api_keys.c.id)
            .offset(offset)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [_row(r) for r in (await conn.execute(query)).all()]

    async def revoke(self, key_id: str, *, at: float) -> bool:
        """Revoke the key; False when it was revoked already (or is unknown)."""
        query = (
            sa.update(api_keys)
            .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=at)
        )
        async with writing(self._engine) as conn:
            return (await conn.execute(query)).rowcount == 1

    async def active(self, now: float) -> list[ApiKeyRow]:
        """Every app's active keys (what the ingress accepts)."""
        query = sa.select(api_keys).where(_active(now)).order_by(api_keys.c.id)
        async with self._engine.connect() as conn:
            return [_row(r) for r in (await conn.execute(query)).all()]

    async def requiring_apps(self) -> list[RequiringApp]:
        """The apps whose current spec says ``api_auth: required``."""
        query = (
            sa.select(apps.c.id, apps.c.name, apps.c.tenant_id)
            .where(apps.c.spec["api_auth"].as_string() == "required")
            .order_by(apps.c.id)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [RequiringApp(int(r.id), r.name, r.tenant_id) for r in rows]

    async def touch(self, used: Mapping[str, float]) -> None:
        """Record when keys were last used (``key id → time``); a later time already stored
        is kept."""
        if not used:
            return
        query = (
            sa.update(api_keys)
            .where(
                api_keys.c.id == sa.bindparam("key_id"),
                sa.or_(
                    api_keys.c.last_used_at.is_(None),
                    api_keys.c.last_used_at < sa.bindparam("at"),
                ),
            )
            .values(last_used_at=sa.bindparam("at"))
        )
        rows = [{"key_id": key_id, "at": at} for key_id, at in sorted(used.items())]
        async with writing(self._engine) as conn:
            await conn.execute(query, rows)
