"""What every endpoint of the authorization server shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from appdeck.auth.audit import AuditEvent, AuditLog
from appdeck.auth.keys import SigningKeys
from appdeck.auth.throttle import AuthThrottles
from appdeck.auth.tokens import TokenIssuer
from appdeck.auth.urls import PublicUrls
from appdeck.settings import Settings
from appdeck.storage.identity import IdentityStore, PersonalTokenRecord
from appdeck.storage.oauth import OAuthStore

RevokeJti = Callable[[str, float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ServerContext:
    issuer: str
    resource: str
    token_issuer: TokenIssuer
    keys: SigningKeys
    identities: IdentityStore
    oauth: OAuthStore
    revoke_jti: RevokeJti
    audit: AuditLog
    settings: Settings
    clock: Callable[[], float]
    forget_pat: Callable[[PersonalTokenRecord], None] = lambda record: None  # no listener
    """Tells this process's resource server that a PAT was revoked (``/revoke``)."""
    throttles: AuthThrottles = field(default_factory=AuthThrottles.build)
    """Sign-in failures per IP and per account, registrations per IP."""
    urls: PublicUrls | None = None
    """The issuer's other spellings (loopback names); None: the issuer only."""

    @property
    def public(self) -> PublicUrls:
        return self.urls if self.urls is not None else PublicUrls(self.issuer)

    def issuer_for(self, host: str | None) -> str:
        """The issuer as the client spelled it (the request's ``Host``), among ours."""
        return self.public.base_for(host)

    def is_resource(self, value: str) -> bool:
        """Whether an RFC 8707 ``resource`` value names our MCP endpoint, under any of our
        spellings. Scheme and host compare case-insensitively and a trailing slash is ignored
        (MCP 2025-11-25)."""
        path = self.resource[len(self.issuer) :] if self.resource.startswith(self.issuer) else ""
        if not path:
            return PublicUrls(self.resource).is_resource(value, "")
        return self.public.is_resource(value, path)

    async def revoke_family(self, family_id: str) -> int:
        """Revoke a refresh-token family and the live access tokens issued in it."""
        live = await self.oauth.revoke_family(family_id, self.clock())
        for jti, expires_at in live:
            await self.revoke_jti(jti, expires_at)
        return len(live)

    def refuse(self, reason: str, *, method: str, **fields: Any) -> None:
        """Audit a refusal. ``reason`` is a short code; never pass a secret in ``fields``."""
        detail = {"reason": reason, **fields.pop("detail", {})}
        self.audit.record(
            AuditEvent(event="refused", outcome="denied", method=method, detail=detail, **fields)
        )
