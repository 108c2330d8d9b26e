"""Tenants, users and tokens, for the command line and the dev bootstrap of ``make run``."""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import asdict
from typing import Any, Final, Protocol

from appdeck import activity
from appdeck.auth import scopes as scope_names
from appdeck.auth.audit import AuditEvent, AuditLog, AuditSink, Row, as_row
from appdeck.auth.bearer import PAT_PREFIX
from appdeck.auth.hashing import hash_password, new_secret, token_hash
from appdeck.auth.tokens import AccessClaims, TokenIssuer
from appdeck.common.errors import FailedPrecondition, InvalidArgument, NotFound
from appdeck.model import hostnames
from appdeck.storage.identity import (
    IdentityStore,
    PersonalTokenRecord,
    TenantRecord,
    UserRecord,
)
from appdeck.storage.oauth import OAuthStore
from appdeck.storage.sessions import SqlSessionStore

SLUG: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
USER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
"""Both checked with ``fullmatch`` (``$`` would let a final newline through)."""
TENANT_ROLES: Final = ("admin", "member")
MAX_TOKEN_TTL: Final = 366 * 86400
DEFAULT_PAT_TTL: Final = 90 * 86400
"""A PAT's lifetime unless the operator asks for another (or for none: ``--expires never``)."""
NEVER: Final = 0
"""``create_pat(expires_in=NEVER)``: a PAT that does not expire."""
JWT_MAX_TTL: Final = 7 * 86400
"""The longest-lived access token this server issues (``appdeck token create --oauth``)."""


class AccessListener(Protocol):
    """The resource server of this process (:class:`~appdeck.auth.bearer.BearerAuthenticator`),
    told about a change so that it takes effect at once here; other processes notice it
    within their trust window (``APPDECK_AUTH_TRUST_SECONDS``)."""

    def forget_principal(self, tenant: str, user: str | None = None) -> None: ...

    def forget_pat(self, record: PersonalTokenRecord) -> None: ...

    async def revoke_jti(self, jti: str, expires_at: float) -> None: ...


class QueuedAudit:
    """An :class:`AuditSink` that queues rows on an :class:`AuditLog`: its writer bounds each
    value, writes a refused batch row by row and puts what still fails in its dead-letter file
    (the server's and the command line's audit rows take the same road)."""

    def __init__(self, log: AuditLog) -> None:
        self._log = log

    async def append(self, rows: list[Row]) -> None:
        for row in rows:
            self._log.record_row(row)


class IdentityAdmin:
    def __init__(
        self,
        identities: IdentityStore,
        issuer: TokenIssuer | None = None,
        audit: AuditSink | None = None,
        *,
        oauth: OAuthStore | None = None,
        sessions: SqlSessionStore | None = None,
        listener: AccessListener | None = None,
    ) -> None:
        self._identities = identities
        self._issuer = issuer
        self._audit = audit
        self._oauth = oauth
        self._sessions = sessions
        self._listener = listener

    async def _record(
        self, event: str, tenant_id: str | None, user_id: str | None, detail: dict[str, object]
    ) -> None:
        if self._audit is not None:
            row = AuditEvent(
                event=event,
                outcome="ok",
                tenant_id=tenant_id,
                user_id=user_id,
                client_id="appdeck-cli",
                detail=detail,
            )
            await self._audit.append([as_row(row)])

    async def _issued(
        self, kind: str, tenant_id: str, user_id: str, detail: dict[str, object]
    ) -> None:
        token_id = detail.get("pat_id") or detail.get("jti")
        activity.token_issued(
            kind=kind,
            tenant=tenant_id,
            user=user_id,
            client="appdeck-cli",
            token_id=str(token_id) if token_id else None,
        )
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
        if not SLUG.fullmatch(tenant_id):
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
        if not USER_NAME.fullmatch(name):
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
        expires_in: int = DEFAULT_PAT_TTL,
        name: str = "cli",
    ) -> tuple[str, PersonalTokenRecord]:
        """A new personal access token; the plain token is returned once, only its hash kept.
        It expires in 90 days unless ``expires_in`` says otherwise (:data:`NEVER`: no expiry)."""
        user = await self.user(tenant_id, user_name)
        scopes = scope_names.parse(scope)
        if not scopes:
            raise InvalidArgument("a token needs at least one scope")
        if expires_in != NEVER and not 60 <= expires_in <= MAX_TOKEN_TTL:
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
        if not 60 <= expires_in <= JWT_MAX_TTL:
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

    # -- the operator's lifecycle ---------------------------------------------------------

    def _need_oauth(self) -> OAuthStore:
        if self._oauth is None:
            raise FailedPrecondition("the embedded authorization server is not in use")
        return self._oauth

    async def tenant(self, tenant_id: str) -> TenantRecord:
        record = await self._identities.get_tenant(tenant_id)
        if record is None:
            raise NotFound(f"no tenant {tenant_id!r}", hint="see: appdeck tenant list")
        return record

    async def any_user(self, tenant_id: str, name: str) -> UserRecord:
        """The user, disabled or not."""
        await self.tenant(tenant_id)
        user = await self._identities.find_user(tenant_id, name)
        if user is None:
            raise NotFound(
                f"no user {name!r} in tenant {tenant_id!r}", hint="see: appdeck user list"
            )
        return user

    async def list_tenants(self) -> list[TenantRecord]:
        return await self._identities.list_tenants()

    async def set_tenant_disabled(self, tenant_id: str, disabled: bool) -> TenantRecord:
        """Disable (or enable) a tenant: its users' tokens are refused and nobody signs in."""
        await self.tenant(tenant_id)
        await self._identities.set_tenant_disabled(tenant_id, disabled)
        if self._listener is not None:
            self._listener.forget_principal(tenant_id)
        if disabled:
            await self._end_sessions(tenant_id, None)
        event = "tenant_disabled" if disabled else "tenant_enabled"
        await self._record(event, tenant_id, None, {})
        return await self.tenant(tenant_id)

    async def list_users(self, tenant_id: str) -> list[UserRecord]:
        await self.tenant(tenant_id)
        return await self._identities.list_users(tenant_id)

    async def set_user_disabled(self, tenant_id: str, name: str, disabled: bool) -> UserRecord:
        """Disable (or enable) a user: every token of theirs is refused, they cannot sign in."""
        user = await self.any_user(tenant_id, name)
        await self._identities.set_user_disabled(user.id, disabled)
        if self._listener is not None:
            self._listener.forget_principal(tenant_id, user.id)
        if disabled:
            await self._end_sessions(tenant_id, user.id)
        await self._record("user_disabled" if disabled else "user_enabled", tenant_id, user.id, {})
        return await self.any_user(tenant_id, name)

    async def set_password(self, tenant_id: str, name: str, password: str) -> UserRecord:
        user = await self.any_user(tenant_id, name)
        if len(password) < 8:
            raise InvalidArgument("the password must have at least 8 characters")
        await self._identities.set_password(user.id, hash_password(password))
        await self._record("password_set", tenant_id, user.id, {})
        return user

    async def list_tokens(
        self, tenant_id: str, user_name: str | None = None
    ) -> list[dict[str, Any]]:
        """PATs (revoked and expired ones too) and the live access tokens issued through
        OAuth grants (by ``jti``). Never a token's value or hash."""
        await self.tenant(tenant_id)
        user_id = None if user_name is None else (await self.any_user(tenant_id, user_name)).id
        now = time.time()
        rows: list[dict[str, Any]] = []
        for pat in await self._identities.list_all_pats(tenant_id, user_id):
            data = {k: v for k, v in asdict(pat).items() if k != "token_hash"}
            data["scopes"] = list(pat.scopes)
            data["kind"] = "pat"
            data["state"] = _state(pat.revoked_at, pat.expires_at, now)
            rows.append(data)
        if self._oauth is not None:
            for ledger in await self._oauth.list_live_access_tokens(tenant_id, user_id, now):
                rows.append(
                    {
                        "kind": "oauth",
                        "id": ledger.token_hash.split(":", 1)[1],
                        "tenant_id": ledger.tenant_id,
                        "user_id": ledger.user_id,
                        "client_id": ledger.client_id,
                        "scopes": ledger.scope.split(),
                        "expires_at": ledger.expires_at,
                        "state": "active",
                    }
                )
        return rows

    async def revoke_token(self, token_id: str) -> dict[str, Any]:
        """Revoke a PAT by its id, or an access token (JWT) by its ``jti``."""
        pat = await self._identities.get_pat(token_id)
        if pat is not None:
            if pat.revoked_at is not None:
                return {"kind": "pat", "id": pat.id, "revoked": False, "already": True}
            await self._identities.revoke_pat(pat.id)
            if self._listener is not None:
                self._listener.forget_pat(pat)
            activity.token_revoked(
                kind="pat", tenant=pat.tenant_id, user=pat.user_id, client=None, token_id=pat.id
            )
            await self._record("token_revoked", pat.tenant_id, pat.user_id, {"pat_id": pat.id})
            return {"kind": "pat", "id": pat.id, "revoked": True, "already": False}
        if not re.fullmatch(r"[A-Za-z0-9_-]{8,128}", token_id):
            raise NotFound(f"no token {token_id!r}", hint="see: appdeck token list")
        expires = None if self._oauth is None else await self._oauth.access_token_expiry(token_id)
        # a jti this server did not record (``token create --oauth``) is kept revoked for as
        # long as any token it could name may live
        expires_at = expires if expires is not None else time.time() + JWT_MAX_TTL
        if self._listener is not None:
            await self._listener.revoke_jti(token_id, expires_at)
        else:
            await self._identities.revoke_jti(token_id, expires_at)
        activity.token_revoked(kind="oauth", tenant=None, user=None, client=None, token_id=token_id)
        await self._record("token_revoked", None, None, {"jti": token_id})
        return {"kind": "oauth", "id": token_id, "revoked": True, "expires_at": expires_at}

    async def list_grants(
        self, tenant_id: str, user_name: str | None = None
    ) -> list[dict[str, Any]]:
        oauth = self._need_oauth()
        await self.tenant(tenant_id)
        user_id = None if user_name is None else (await self.any_user(tenant_id, user_name)).id
        return [asdict(g) for g in await oauth.list_grants(tenant_id, user_id)]

    async def revoke_grant(
        self, tenant_id: str, user_name: str | None, client_id: str
    ) -> dict[str, Any]:
        """Revoke what ``client_id`` was granted (by one user, or by all of the tenant's):
        its refresh tokens and the live access tokens issued from them."""
        oauth = self._need_oauth()
        await self.tenant(tenant_id)
        user_id = None if user_name is None else (await self.any_user(tenant_id, user_name)).id
        live = await oauth.revoke_grants(client_id=client_id, tenant_id=tenant_id, user_id=user_id)
        await self._revoke_jtis(live)
        await self._record(
            "grant_revoked", tenant_id, user_id, {"client": client_id, "access_tokens": len(live)}
        )
        return {"client_id": client_id, "user_id": user_id, "access_tokens_revoked": len(live)}

    async def _revoke_jtis(self, live: list[tuple[str, float]]) -> None:
        for jti, expires_at in live:
            if self._listener is not None:
                await self._listener.revoke_jti(jti, expires_at)
            else:
                await self._identities.revoke_jti(jti, expires_at)

    async def list_clients(self) -> list[dict[str, Any]]:
        oauth = self._need_oauth()
        return [
            {k: v for k, v in asdict(c).items() if k not in ("secret_hash", "metadata")}
            for c in await oauth.list_clients()
        ]

    async def delete_client(self, client_id: str) -> dict[str, Any]:
        """Delete an OAuth client and revoke everything it was granted."""
        oauth = self._need_oauth()
        if await oauth.get_client(client_id) is None:
            raise NotFound(f"no OAuth client {client_id!r}", hint="see: appdeck client list")
        live = await oauth.revoke_grants(client_id=client_id)
        await self._revoke_jtis(live)
        await oauth.delete_client(client_id)
        await self._record("client_deleted", None, None, {"client": client_id})
        return {"client_id": client_id, "deleted": True, "access_tokens_revoked": len(live)}

    async def _end_sessions(self, tenant_id: str, user_id: str | None) -> None:
        """A disabled user's (or tenant's) sessions end: a running server forgets them at its
        next sweep and closes their streams, so no notification reaches them any more."""
        if self._sessions is None:
            return
        for row in await self._sessions.list_sessions(tenant_id, user_id):
            await self._sessions.delete(row["id"])

    def _need_sessions(self) -> SqlSessionStore:
        if self._sessions is None:
            raise FailedPrecondition("no session store")
        return self._sessions

    async def list_sessions(
        self, tenant_id: str | None = None, user_name: str | None = None
    ) -> list[dict[str, Any]]:
        store = self._need_sessions()
        user_id = None
        if tenant_id is not None:
            await self.tenant(tenant_id)
            if user_name is not None:
                user_id = (await self.any_user(tenant_id, user_name)).id
        return await store.list_sessions(tenant_id, user_id)

    async def drop_session(self, session_id: str) -> dict[str, Any]:
        store = self._need_sessions()
        if await store.load(session_id) is None:
            raise NotFound(f"no session {session_id!r}", hint="see: appdeck session list")
        await store.delete(session_id)
        await self._record("session_dropped", None, None, {"session": session_id})
        return {"id": session_id, "dropped": True}


def _state(revoked_at: float | None, expires_at: float | None, now: float) -> str:
    if revoked_at is not None:
        return "revoked"
    if expires_at is not None and expires_at <= now:
        return "expired"
    return "active"
