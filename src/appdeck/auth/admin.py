"""Tenants, users and tokens, for the command line and the dev bootstrap of ``make run``."""

from __future__ import annotations

import re
import secrets
import time
from typing import Final

from appdeck.auth import scopes as scope_names
from appdeck.auth.audit import AuditEvent, AuditSink, as_row
from appdeck.auth.bearer import PAT_PREFIX
from appdeck.auth.hashing import hash_password, new_secret, token_hash
from appdeck.auth.tokens import AccessClaims, TokenIssuer
from appdeck.common.errors import InvalidArgument, NotFound
from appdeck.platform import hostnames
from appdeck.storage.identity import (
    IdentityStore,
    PersonalTokenRecord,
    TenantRecord,
    UserRecord,
)

SLUG: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
USER_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
TENANT_ROLES: Final = ("admin", "member")
MAX_TOKEN_TTL: Final = 366 * 86400


class IdentityAdmin:
    def __init__(
        self,
        identities: IdentityStore,
        issuer: TokenIssuer | None = None,
        audit: AuditSink | None = None,
    ) -> None:
        self._identities = identities
        self._issuer = issuer
        self._audit = audit

    async def _issued(
        self, kind: str, tenant_id: str, user_id: str, detail: dict[str, object]
    ) -> None:
        if self._audit is not None:
            event = AuditEvent(
                event="token_issued",
                outcome="ok",
                tenant_id=tenant_id,
                user_id=user_id,
                client_id="appdeck-cli",
                detail={"kind": kind, **detail},
            )
            await self._audit.append([as_row(event)])

    async def create_tenant(self, tenant_id: str, name: str | None = None) -> TenantRecord:
        if not SLUG.match(tenant_id):
            raise InvalidArgument(
                f"invalid tenant id {tenant_id!r}",
                hint="lower-case letters, digits and dashes, at most 63 characters",
            )
        if not hostnames.routable_tenant(tenant_id):
            # the id is part of every app hostname (<app>--<tenant>.localhost): it must parse
            # back unambiguously and leave room for an app name in a 63-character DNS label
            raise InvalidArgument(
                f"invalid tenant id {tenant_id!r}: apps are served at {hostnames.PATTERN}",
                hint="no '--', no '-' at either end, at most "
                f"{hostnames.MAX_LABEL - len(hostnames.SEPARATOR) - 1} characters",
            )
        return await self._identities.create_tenant(tenant_id, name or tenant_id)

    async def create_user(
        self, tenant_id: str, name: str, password: str | None, role: str = "member"
    ) -> UserRecord:
        if not USER_NAME.match(name):
            raise InvalidArgument(f"invalid user name {name!r}")
        if role not in TENANT_ROLES:
            raise InvalidArgument(f"invalid role {role!r}", hint="admin or member")
        if password is not None and len(password) < 8:
            raise InvalidArgument("the password must have at least 8 characters")
        hashed = hash_password(password) if password else None
        return await self._identities.create_user(tenant_id, name, hashed, role)

    async def user(self, tenant_id: str, name: str) -> UserRecord:
        user = await self._identities.find_user(tenant_id, name)
        if user is None or user.disabled:
            raise NotFound(f"no user {name!r} in tenant {tenant_id!r}")
        return user

    async def create_pat(
        self,
        tenant_id: str,
        user_name: str,
        scope: str,
        *,
        expires_in: int | None = None,
        name: str = "cli",
    ) -> tuple[str, PersonalTokenRecord]:
        """A new personal access token; the plain token is returned once, only its hash kept."""
        user = await self.user(tenant_id, user_name)
        scopes = scope_names.parse(scope)
        if not scopes:
            raise InvalidArgument("a token needs at least one scope")
        if expires_in is not None and not 60 <= expires_in <= MAX_TOKEN_TTL:
            raise InvalidArgument(f"expires_in must be between 60 and {MAX_TOKEN_TTL} seconds")
        token = new_secret(PAT_PREFIX, 32)
        now = time.time()
        record = PersonalTokenRecord(
            id=secrets.token_hex(8),
            token_hash=token_hash(token),
            tenant_id=tenant_id,
            user_id=user.id,
            name=name,
            scopes=tuple(sorted(scopes)),
            created_at=now,
            expires_at=now + expires_in if expires_in else None,
            last_used_at=None,
            revoked_at=None,
        )
        await self._identities.insert_pat(record)
        await self._issued(
            "pat", tenant_id, user.id, {"pat_id": record.id, "scopes": list(record.scopes)}
        )
        return token, record

    async def mint_access_token(
        self, tenant_id: str, user_name: str, scope: str, *, expires_in: int = 3600
    ) -> tuple[str, AccessClaims]:
        """A short-lived JWT access token from the embedded server, for headless use."""
        if self._issuer is None:
            raise InvalidArgument("the embedded authorization server is not in use")
        user = await self.user(tenant_id, user_name)
        scopes = scope_names.parse(scope)
        if not 60 <= expires_in <= 7 * 86400:
            raise InvalidArgument("expires_in must be between 60 seconds and 7 days")
        issued = self._issuer.issue(
            tenant=tenant_id,
            user=user.id,
            scope=scope_names.render(scopes),
            client_id="appdeck-cli",
            ttl_seconds=expires_in,
        )
        await self._issued(
            "oauth", tenant_id, user.id, {"jti": issued[1].jti, "expires_in": expires_in}
        )
        return issued

    async def ensure_dev(self, tenant_id: str = "dev", user_name: str = "dev") -> str | None:
        """Create the dev tenant and admin user when missing; returns the new password once."""
        if await self._identities.get_tenant(tenant_id) is None:
            await self.create_tenant(tenant_id, "Development")
        if await self._identities.find_user(tenant_id, user_name) is not None:
            return None
        password = secrets.token_urlsafe(12)
        await self.create_user(tenant_id, user_name, password, role="admin")
        return password
