"""What every endpoint of the authorization server shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from appdeck.auth.audit import AuditEvent, AuditLog
from appdeck.auth.keys import SigningKeys
from appdeck.auth.tokens import TokenIssuer
from appdeck.settings import Settings
from appdeck.storage.identity import IdentityStore
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

    def is_resource(self, value: str) -> bool:
        """Whether an RFC 8707 ``resource`` value names our MCP endpoint. Scheme and host
        compare case-insensitively and a trailing slash is ignored (MCP 2025-11-25)."""
        return _canonical(value) == _canonical(self.resource)

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


def _canonical(value: str) -> tuple[str, str, str, str] | None:
    try:
        parts = urlsplit(value)
        netloc = parts.netloc.lower()
    except ValueError:
        return None
    if parts.fragment or not parts.scheme or not netloc:
        return None
    return (parts.scheme.lower(), netloc, parts.path.rstrip("/"), parts.query)
