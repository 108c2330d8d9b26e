"""The embedded authorization server's state: OAuth clients, authorization codes and refresh
tokens (tables ``oauth_clients``, ``auth_codes``, ``refresh_tokens``).

Codes and tokens are stored only as hashes. Every "use once" rule is one conditional
``UPDATE … WHERE not yet used`` whose row count decides, so two replicas racing on the same
code or refresh token cannot both win, on SQLite and on PostgreSQL alike.

Families. Every refresh token belongs to a family: the chain of rotations that started with
one authorization code. The family id is derived from the code's hash
(:func:`family_for_code`), so a replayed code finds the tokens it produced without a column
of its own. Access tokens issued in a family are remembered in the same table as *ledger
rows* (``token_hash = "jti:<jti>"``, born used, so they can never be redeemed: a real token
hash is 64 hex digits) so that revoking a family also tells the caller which access tokens
(``jti``, ``exp``) to revoke.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.common.errors import Conflict
from appdeck.storage.schema import auth_codes, oauth_clients, refresh_tokens

LEDGER_PREFIX: Final = "jti:"
CODE_RETENTION_SECONDS: Final = 3600.0
"""Used or expired codes are kept this long past their expiry, so a late replay is still
recognised as a replay (and revokes what the code produced)."""


@dataclass(frozen=True, slots=True)
class ClientRow:
    client_id: str
    kind: str  # dcr | cimd | static
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...]
    auth_method: str  # none | client_secret_basic | client_secret_post
    secret_hash: str | None = None
    name: str | None = None
    scope: str | None = None
    tenant_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    expires_at: float | None = None
    used_at: float | None = None
    """When it got its first authorization code; a ``dcr`` client without one expires."""
    app_id: int | None = None
    """An app's own client (kind ``app``): its tokens are for that app, never for AppDeck."""

    @property
    def confidential(self) -> bool:
        return self.secret_hash is not None


@dataclass(frozen=True, slots=True)
class AuthCodeRow:
    code_hash: str
    client_id: str
    tenant_id: str
    user_id: str
    redirect_uri: str
    scope: str
    resource: str | None
    code_challenge: str
    expires_at: float
    used: bool = False


@dataclass(frozen=True, slots=True)
class CodeReplay:
    """:meth:`OAuthStore.consume_code` found the code already used: someone replays it."""

    code: AuthCodeRow


@dataclass(frozen=True, slots=True)
class RefreshTokenRow:
    token_hash: str
    family_id: str
    client_id: str
    tenant_id: str
    user_id: str
    scope: str
    resource: str | None
    created_at: float
    expires_at: float
    used_at: float | None = None
    revoked: bool = False


def family_for_code(code_hash: str) -> str:
    """The refresh-token family started by the code with this hash."""
    return "fam_" + hashlib.sha256(("family:" + code_hash).encode()).hexdigest()[:40]


def _client(row: Any) -> ClientRow:
    return ClientRow(
        client_id=row.client_id,
        kind=row.kind,
        redirect_uris=tuple(row.redirect_uris or ()),
        grant_types=tuple(row.grant_types or ()),
        auth_method=row.auth_method,
        secret_hash=row.secret_hash,
        name=row.name,
        scope=row.scope,
        tenant_id=row.tenant_id,
        metadata=dict(row.metadata or {}),
        created_at=row.created_at,
        expires_at=row.expires_at,
        used_at=row.used_at,
        app_id=row.app_id,
    )


def _client_values(client: ClientRow) -> dict[str, Any]:
    used = {"used_at": client.used_at} if client.used_at is not None else {}
    return used | {
        "client_id": client.client_id,
        "secret_hash": client.secret_hash,
        "name": client.name,
        "kind": client.kind,
        "redirect_uris": list(client.redirect_uris),
        "grant_types": list(client.grant_types),
        "auth_method": client.auth_method,
        "scope": client.scope,
        "tenant_id": client.tenant_id,
        "metadata": client.metadata,
        "created_at": client.created_at or time.time(),
        "expires_at": client.expires_at,
        "app_id": client.app_id,
    }


def _code(row: Any) -> AuthCodeRow:
    return AuthCodeRow(
        code_hash=row.code_hash,
        client_id=row.client_id,
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        redirect_uri=row.redirect_uri,
        scope=row.scope,
        resource=row.resource,
        code_challenge=row.code_challenge,
        expires_at=row.expires_at,
        used=bool(row.used),
    )


def _refresh(row: Any) -> RefreshTokenRow:
    return RefreshTokenRow(
        token_hash=row.token_hash,
        family_id=row.family_id,
        client_id=row.client_id,
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        scope=row.scope,
        resource=row.resource,
        created_at=row.created_at,
        expires_at=row.expires_at,
        used_at=row.used_at,
        revoked=bool(row.revoked),
    )


@dataclass(frozen=True, slots=True)
class GrantRow:
    tenant_id: str
    user_id: str
    client_id: str
    scope: str
    created_at: float
    expires_at: float
    refreshed_at: float | None = None
    """When its newest live refresh token was issued (the last refresh, or the consent)."""


class OAuthStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    # -- clients --------------------------------------------------------------------------

    async def insert_client(self, client: ClientRow) -> None:
        try:
            async with self._engine.begin() as conn:
                await conn.execute(sa.insert(oauth_clients).values(_client_values(client)))
        except IntegrityError:
            raise Conflict(f"OAuth client {client.client_id!r} already exists") from None

    async def get_client(self, client_id: str) -> ClientRow | None:
        query = sa.select(oauth_clients).where(oauth_clients.c.client_id == client_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _client(row)

    async def upsert_cimd_client(self, client: ClientRow) -> None:
        """Store (or refresh) the cached metadata document of a URL client id. Never replaces
        a client of another kind that happens to have the same id."""
        if client.kind != "cimd":
            raise ValueError("upsert_cimd_client stores cimd clients only")
        values = _client_values(client)
        update = (
            sa.update(oauth_clients)
            .where(oauth_clients.c.client_id == client.client_id, oauth_clients.c.kind == "cimd")
            .values({k: v for k, v in values.items() if k != "client_id"})
        )
        for _ in range(2):  # a concurrent first fetch may insert between our update and insert
            async with self._engine.begin() as conn:
                if (await conn.execute(update)).rowcount:
                    return
            try:
                async with self._engine.begin() as conn:
                    await conn.execute(sa.insert(oauth_clients).values(values))
                return
            except IntegrityError:
                existing = await self.get_client(client.client_id)
                if existing is not None and existing.kind != "cimd":
                    break
        raise Conflict(f"OAuth client id {client.client_id!r} is taken by another client")

    async def delete_client(self, client_id: str) -> bool:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.delete(oauth_clients).where(oauth_clients.c.client_id == client_id)
            )
        return bool(result.rowcount)

    # -- authorization codes --------------------------------------------------------------

    async def insert_code(self, code: AuthCodeRow) -> None:
        """Store the code, and mark its client used (the first time): a dynamically
        registered client that never gets here is swept by :meth:`cleanup`."""
        first_use = (
            sa.update(oauth_clients)
            .where(oauth_clients.c.client_id == code.client_id, oauth_clients.c.used_at.is_(None))
            .values(used_at=time.time())
        )
        async with self._engine.begin() as conn:
            await conn.execute(first_use)
            await conn.execute(
                sa.insert(auth_codes).values(
                    code_hash=code.code_hash,
                    client_id=code.client_id,
                    tenant_id=code.tenant_id,
                    user_id=code.user_id,
                    redirect_uri=code.redirect_uri,
                    scope=code.scope,
                    resource=code.resource,
                    code_challenge=code.code_challenge,
                    expires_at=code.expires_at,
                    used=False,
                )
            )

    async def consume_code(self, code_hash: str) -> AuthCodeRow | CodeReplay | None:
        """Mark the code used and return it; :class:`CodeReplay` when it was already used;
        ``None`` when unknown. Expiry is the caller's to check (the row says when)."""
        claim = (
            sa.update(auth_codes)
            .where(auth_codes.c.code_hash == code_hash, auth_codes.c.used.is_(False))
            .values(used=True)
        )
        query = sa.select(auth_codes).where(auth_codes.c.code_hash == code_hash)
        async with self._engine.begin() as conn:
            won = (await conn.execute(claim)).rowcount == 1
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return _code(row) if won else CodeReplay(_code(row))

    # -- refresh tokens -------------------------------------------------------------------

    async def insert_refresh(self, token: RefreshTokenRow) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(sa.insert(refresh_tokens).values(_refresh_values(token)))

    async def get_refresh(self, token_hash: str) -> RefreshTokenRow | None:
        if token_hash.startswith(LEDGER_PREFIX):
            return None
        query = sa.select(refresh_tokens).where(refresh_tokens.c.token_hash == token_hash)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _refresh(row)

    async def mark_refresh_used(self, token_hash: str, now: float) -> bool:
        """Rotate: True for the one caller that marks the live token used; False when it was
        already used or revoked (the caller then treats the presentation as reuse)."""
        stmt = (
            sa.update(refresh_tokens)
            .where(
                refresh_tokens.c.token_hash == token_hash,
                refresh_tokens.c.used_at.is_(None),
                refresh_tokens.c.revoked.is_(False),
            )
            .values(used_at=now)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def revoke_refresh(self, token_hash: str) -> bool:
        """Revoke one refresh token (not its family)."""
        stmt = (
            sa.update(refresh_tokens)
            .where(refresh_tokens.c.token_hash == token_hash, refresh_tokens.c.revoked.is_(False))
            .values(revoked=True)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def record_access_token(
        self, template: RefreshTokenRow, jti: str, expires_at: float
    ) -> None:
        """Remember that access token ``jti`` was issued in ``template.family_id`` to
        ``template``'s client and user (a ledger row, see the module doc)."""
        ledger = RefreshTokenRow(
            token_hash=LEDGER_PREFIX + jti,
            family_id=template.family_id,
            client_id=template.client_id,
            tenant_id=template.tenant_id,
            user_id=template.user_id,
            scope=template.scope,
            resource=template.resource,
            created_at=template.created_at,
            expires_at=expires_at,
            used_at=template.created_at,
        )
        await self.insert_refresh(ledger)

    async def revoke_family(
        self, family_id: str, now: float | None = None
    ) -> list[tuple[str, float]]:
        """Revoke every refresh token of the family. Returns the (jti, exp) of the family's
        access tokens that were live and not revoked before, for the caller to revoke."""
        now = time.time() if now is None else now
        in_family = refresh_tokens.c.family_id == family_id
        ledger = sa.select(refresh_tokens.c.token_hash, refresh_tokens.c.expires_at).where(
            in_family,
            refresh_tokens.c.token_hash.startswith(LEDGER_PREFIX),
            refresh_tokens.c.revoked.is_(False),
            refresh_tokens.c.expires_at > now,
        )
        async with self._engine.begin() as conn:
            live = (await conn.execute(ledger)).all()
            await conn.execute(
                sa.update(refresh_tokens)
                .where(in_family, refresh_tokens.c.revoked.is_(False))
                .values(revoked=True)
            )
        return [(r.token_hash[len(LEDGER_PREFIX) :], r.expires_at) for r in live]

    # -- grants (what a user consented to a client, held as live refresh-token families) ---

    async def list_grants(
        self, tenant_id: str | None = None, user_id: str | None = None, now: float | None = None
    ) -> list[GrantRow]:
        """One row per (tenant, user, client) holding a live refresh token: a consent still in
        use. Access tokens alone (ledger rows) expire within the hour and are not grants."""
        now = time.time() if now is None else now
        rt = refresh_tokens.c
        query = (
            sa.select(
                rt.tenant_id, rt.user_id, rt.client_id, rt.created_at, rt.expires_at, rt.scope
            )
            .where(
                sa.not_(rt.token_hash.startswith(LEDGER_PREFIX)),
                rt.revoked.is_(False),
                rt.used_at.is_(None),
                rt.expires_at > now,
            )
            .order_by(rt.tenant_id, rt.user_id, rt.client_id)
        )
        if tenant_id is not None:
            query = query.where(rt.tenant_id == tenant_id)
        if user_id is not None:
            query = query.where(rt.user_id == user_id)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        # several live families of one client (two devices, a step-up) are one grant: the
        # union of their scopes, from the first consent to the last expiry
        merged: dict[tuple[str, str, str], GrantRow] = {}
        for r in rows:
            key = (r.tenant_id, r.user_id, r.client_id)
            seen = merged.get(key)
            if seen is None:
                merged[key] = GrantRow(*key, r.scope, r.created_at, r.expires_at, r.created_at)
                continue
            union = sorted(set(seen.scope.split()) | set(r.scope.split()))
            merged[key] = GrantRow(
                *key,
                " ".join(union),
                min(seen.created_at, r.created_at),
                max(seen.expires_at, r.expires_at),
                max(seen.refreshed_at or 0.0, r.created_at),
            )
        return list(merged.values())

    async def revoke_grants(
        self,
        *,
        client_id: str,
        tenant_id: str | None = None,
        user_id: str | None = None,
        now: float | None = None,
    ) -> list[tuple[str, float]]:
        """Revoke every refresh-token family of ``client_id`` (for one user when given).
        Returns the (jti, exp) of the live access tokens issued in them, to revoke too."""
        rt = refresh_tokens.c
        query = sa.select(rt.family_id).distinct().where(rt.client_id == client_id)
        if tenant_id is not None:
            query = query.where(rt.tenant_id == tenant_id)
        if user_id is not None:
            query = query.where(rt.user_id == user_id)
        async with self._engine.connect() as conn:
            families = [r.family_id for r in (await conn.execute(query)).all()]
        live: list[tuple[str, float]] = []
        for family in families:
            live += await self.revoke_family(family, now)
        return live

    async def access_token_expiry(self, jti: str) -> float | None:
        """When access token ``jti`` expires, if it was issued through a grant."""
        query = sa.select(refresh_tokens.c.expires_at).where(
            refresh_tokens.c.token_hash == LEDGER_PREFIX + jti
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else float(row.expires_at)

    async def list_live_access_tokens(
        self, tenant_id: str | None = None, user_id: str | None = None, now: float | None = None
    ) -> list[RefreshTokenRow]:
        """The ledger rows of access tokens issued through grants, not revoked, not expired."""
        now = time.time() if now is None else now
        rt = refresh_tokens.c
        query = (
            sa.select(refresh_tokens)
            .where(
                rt.token_hash.startswith(LEDGER_PREFIX),
                rt.revoked.is_(False),
                rt.expires_at > now,
            )
            .order_by(rt.created_at)
        )
        if tenant_id is not None:
            query = query.where(rt.tenant_id == tenant_id)
        if user_id is not None:
            query = query.where(rt.user_id == user_id)
        async with self._engine.connect() as conn:
            return [_refresh(r) for r in (await conn.execute(query)).all()]

    async def app_clients(
        self, app_id: int, *, offset: int = 0, limit: int = 100
    ) -> list[ClientRow]:
        """An app's own clients, oldest first."""
        query = (
            sa.select(oauth_clients)
            .where(oauth_clients.c.app_id == app_id)
            .order_by(oauth_clients.c.created_at, oauth_clients.c.client_id)
            .offset(offset)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [_client(r) for r in (await conn.execute(query)).all()]

    async def tenant_clients(self, tenant_id: str, *, limit: int = 200) -> list[ClientRow]:
        """The clients registered for ``tenant_id`` (machine clients, apps' clients), oldest
        first, at most ``limit``."""
        query = (
            sa.select(oauth_clients)
            .where(oauth_clients.c.tenant_id == tenant_id)
            .order_by(oauth_clients.c.created_at, oauth_clients.c.client_id)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [_client(r) for r in (await conn.execute(query)).all()]

    async def set_client_secret(self, client_id: str, secret_hash: str) -> bool:
        """Replace a confidential client's secret (the old one stops working at once)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.update(oauth_clients)
                .where(oauth_clients.c.client_id == client_id)
                .values(secret_hash=secret_hash)
            )
        return bool(result.rowcount)

    async def list_clients(self) -> list[ClientRow]:
        query = sa.select(oauth_clients).order_by(oauth_clients.c.created_at)
        async with self._engine.connect() as conn:
            return [_client(r) for r in (await conn.execute(query)).all()]

    # -- housekeeping ---------------------------------------------------------------------

    async def cleanup(
        self, now: float | None = None, *, unused_clients_before: float | None = None
    ) -> dict[str, int]:
        """Delete expired codes (after a retention window), refresh tokens, ledger rows and
        cached metadata documents, and (with ``unused_clients_before``) dynamically registered
        clients created before then that never got an authorization code. Returns how many
        rows of each went."""
        now = time.time() if now is None else now
        async with self._engine.begin() as conn:
            codes = await conn.execute(
                sa.delete(auth_codes).where(auth_codes.c.expires_at < now - CODE_RETENTION_SECONDS)
            )
            tokens = await conn.execute(
                sa.delete(refresh_tokens).where(refresh_tokens.c.expires_at < now)
            )
            clients = await conn.execute(
                sa.delete(oauth_clients).where(
                    oauth_clients.c.kind == "cimd", oauth_clients.c.expires_at < now
                )
            )
            unused = 0
            if unused_clients_before is not None:
                swept = await conn.execute(
                    sa.delete(oauth_clients).where(
                        oauth_clients.c.kind == "dcr",
                        oauth_clients.c.used_at.is_(None),
                        oauth_clients.c.created_at < unused_clients_before,
                    )
                )
                unused = swept.rowcount
        return {
            "auth_codes": codes.rowcount,
            "refresh_tokens": tokens.rowcount,
            "cimd_clients": clients.rowcount,
            "unused_clients": unused,
        }


def _refresh_values(token: RefreshTokenRow) -> dict[str, Any]:
    return {
        "token_hash": token.token_hash,
        "family_id": token.family_id,
        "client_id": token.client_id,
        "tenant_id": token.tenant_id,
        "user_id": token.user_id,
        "scope": token.scope,
        "resource": token.resource,
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "used_at": token.used_at,
        "revoked": token.revoked,
    }


__all__: Sequence[str] = (
    "AuthCodeRow",
    "ClientRow",
    "CodeReplay",
    "GrantRow",
    "OAuthStore",
    "RefreshTokenRow",
    "family_for_code",
)
