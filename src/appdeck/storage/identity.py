"""Tenants, users, personal access tokens and revoked access-token ids."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.common.errors import Conflict, NotFound
from appdeck.storage.schema import (
    console_sessions,
    personal_tokens,
    revoked_tokens,
    tenants,
    users,
)


@dataclass(frozen=True, slots=True)
class TenantRecord:
    id: str
    name: str
    created_at: float
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class UserRecord:
    id: str
    tenant_id: str
    name: str
    password_hash: str | None
    role: str
    created_at: float
    disabled: bool


@dataclass(frozen=True, slots=True)
class PersonalTokenRecord:
    id: str
    token_hash: str
    tenant_id: str
    user_id: str
    name: str
    scopes: tuple[str, ...]
    created_at: float
    expires_at: float | None
    last_used_at: float | None
    revoked_at: float | None


def _user(row: Any) -> UserRecord:
    return UserRecord(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        password_hash=row.password_hash,
        role=row.role,
        created_at=row.created_at,
        disabled=row.disabled,
    )


def _pat(row: Any) -> PersonalTokenRecord:
    return PersonalTokenRecord(
        id=row.id,
        token_hash=row.token_hash,
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        name=row.name,
        scopes=tuple(row.scopes),
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


class IdentityStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    # -- tenants --------------------------------------------------------------------------

    async def create_tenant(self, tenant_id: str, name: str) -> TenantRecord:
        record = TenantRecord(tenant_id, name, time.time())
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    sa.insert(tenants).values(id=tenant_id, name=name, created_at=record.created_at)
                )
        except IntegrityError:
            raise Conflict(f"tenant {tenant_id!r} already exists") from None
        return record

    async def get_tenant(self, tenant_id: str) -> TenantRecord | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(tenants).where(tenants.c.id == tenant_id))).first()
        return None if row is None else TenantRecord(row.id, row.name, row.created_at, row.disabled)

    async def list_tenants(self) -> list[TenantRecord]:
        async with self._engine.connect() as conn:
            rows = (await conn.execute(sa.select(tenants).order_by(tenants.c.id))).all()
        return [TenantRecord(r.id, r.name, r.created_at, r.disabled) for r in rows]

    async def set_tenant_disabled(self, tenant_id: str, disabled: bool) -> bool:
        """Disable (or enable) a tenant; False when there is no such tenant."""
        stmt = sa.update(tenants).where(tenants.c.id == tenant_id).values(disabled=disabled)
        async with self._engine.begin() as conn:
            return bool((await conn.execute(stmt)).rowcount)

    async def refused_access(self, tenant_id: str, user_id: str) -> str | None:
        """Why the tenant's user may not use a token now (``"user disabled"``, ``"tenant
        disabled"``), or None. A user or tenant the store does not know (an external IdP's)
        is not refused here: only what an operator disabled is."""
        async with self._engine.connect() as conn:
            tenant = (
                await conn.execute(sa.select(tenants.c.disabled).where(tenants.c.id == tenant_id))
            ).first()
            if tenant is not None and tenant.disabled:
                return "tenant disabled"
            user = (
                await conn.execute(
                    sa.select(users.c.disabled, users.c.tenant_id).where(users.c.id == user_id)
                )
            ).first()
        if user is not None and user.disabled and user.tenant_id == tenant_id:
            return "user disabled"
        return None

    # -- users ----------------------------------------------------------------------------

    async def create_user(
        self, tenant_id: str, name: str, password_hash: str | None, role: str
    ) -> UserRecord:
        if await self.get_tenant(tenant_id) is None:
            raise NotFound(f"no tenant {tenant_id!r}", hint="create it with: appdeck tenant create")
        record = UserRecord(
            id=secrets.token_hex(8),
            tenant_id=tenant_id,
            name=name,
            password_hash=password_hash,
            role=role,
            created_at=time.time(),
            disabled=False,
        )
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    sa.insert(users).values(
                        id=record.id,
                        tenant_id=tenant_id,
                        name=name,
                        password_hash=password_hash,
                        role=role,
                        created_at=record.created_at,
                        disabled=False,
                    )
                )
        except IntegrityError:
            raise Conflict(f"user {name!r} already exists in tenant {tenant_id!r}") from None
        return record

    async def set_password(self, user_id: str, password_hash: str) -> None:
        """A new password; the console sessions the old one signed in end with it (a
        password changed because it leaked must not leave its browsers signed in)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(users).where(users.c.id == user_id).values(password_hash=password_hash)
            )
            await conn.execute(
                sa.delete(console_sessions).where(console_sessions.c.user_id == user_id)
            )

    async def set_user_disabled(self, user_id: str, disabled: bool) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(users).where(users.c.id == user_id).values(disabled=disabled)
            )

    async def get_user(self, user_id: str) -> UserRecord | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(users).where(users.c.id == user_id))).first()
        return None if row is None else _user(row)

    async def find_user(self, tenant_id: str, name: str) -> UserRecord | None:
        query = sa.select(users).where(users.c.tenant_id == tenant_id, users.c.name == name)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _user(row)

    async def list_users(self, tenant_id: str) -> list[UserRecord]:
        query = sa.select(users).where(users.c.tenant_id == tenant_id).order_by(users.c.name)
        async with self._engine.connect() as conn:
            return [_user(r) for r in (await conn.execute(query)).all()]

    # -- personal access tokens -----------------------------------------------------------

    async def insert_pat(self, record: PersonalTokenRecord) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.insert(personal_tokens).values(
                    id=record.id,
                    token_hash=record.token_hash,
                    tenant_id=record.tenant_id,
                    user_id=record.user_id,
                    name=record.name,
                    scopes=list(record.scopes),
                    created_at=record.created_at,
                    expires_at=record.expires_at,
                    last_used_at=None,
                    revoked_at=None,
                )
            )

    async def pat_by_hash(self, token_hash: str) -> PersonalTokenRecord | None:
        query = sa.select(personal_tokens).where(personal_tokens.c.token_hash == token_hash)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _pat(row)

    async def list_pats(self, tenant_id: str, user_id: str) -> list[PersonalTokenRecord]:
        query = (
            sa.select(personal_tokens)
            .where(personal_tokens.c.tenant_id == tenant_id, personal_tokens.c.user_id == user_id)
            .order_by(personal_tokens.c.created_at)
        )
        async with self._engine.connect() as conn:
            return [_pat(r) for r in (await conn.execute(query)).all()]

    async def list_all_pats(
        self, tenant_id: str | None = None, user_id: str | None = None
    ) -> list[PersonalTokenRecord]:
        query = sa.select(personal_tokens).order_by(personal_tokens.c.created_at)
        if tenant_id is not None:
            query = query.where(personal_tokens.c.tenant_id == tenant_id)
        if user_id is not None:
            query = query.where(personal_tokens.c.user_id == user_id)
        async with self._engine.connect() as conn:
            return [_pat(r) for r in (await conn.execute(query)).all()]

    async def get_pat(self, pat_id: str) -> PersonalTokenRecord | None:
        query = sa.select(personal_tokens).where(personal_tokens.c.id == pat_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _pat(row)

    async def touch_pats(self, last_used: dict[str, float]) -> None:
        if not last_used:
            return
        stmt = (
            sa.update(personal_tokens)
            .where(personal_tokens.c.id == sa.bindparam("pat_id"))
            .values(last_used_at=sa.bindparam("used"))
        )
        async with self._engine.begin() as conn:
            await conn.execute(stmt, [{"pat_id": k, "used": v} for k, v in last_used.items()])

    async def revoke_pat(self, pat_id: str) -> bool:
        stmt = (
            sa.update(personal_tokens)
            .where(personal_tokens.c.id == pat_id, personal_tokens.c.revoked_at.is_(None))
            .values(revoked_at=time.time())
        )
        async with self._engine.begin() as conn:
            return bool((await conn.execute(stmt)).rowcount)

    # -- revoked access tokens ------------------------------------------------------------

    async def revoke_jti(self, jti: str, expires_at: float) -> None:
        async with self._engine.begin() as conn:
            exists = (
                await conn.execute(
                    sa.select(revoked_tokens.c.jti).where(revoked_tokens.c.jti == jti)
                )
            ).first()
            if exists is None:
                await conn.execute(sa.insert(revoked_tokens).values(jti=jti, expires_at=expires_at))

    async def revoked_jtis(self, now: float) -> set[str]:
        query = sa.select(revoked_tokens.c.jti).where(revoked_tokens.c.expires_at > now)
        async with self._engine.connect() as conn:
            return {r.jti for r in (await conn.execute(query)).all()}

    async def purge_revocations(self, now: float) -> int:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.delete(revoked_tokens).where(revoked_tokens.c.expires_at <= now)
            )
        return result.rowcount


__all__: Sequence[str] = ("IdentityStore", "PersonalTokenRecord", "TenantRecord", "UserRecord")
