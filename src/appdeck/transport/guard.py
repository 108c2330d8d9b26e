"""Who may use /mcp and how often.

:class:`Guard` authenticates (401 with a ``WWW-Authenticate`` challenge) and applies the
per-token rate limit (429 + ``Retry-After`` + ``-32004`` + ``retryAfterMs``); each refusal goes
to the audit trail. What callers then do is audited by the protocol core itself.
"""

from __future__ import annotations

from typing import Any

from appdeck.auth import Authenticator, AuthError
from appdeck.auth.ratelimit import RateLimiter
from appdeck.common.identity import Principal
from appdeck.protocol import errors as rpc
from appdeck.protocol.ports import AuditTrail
from appdeck.transport.responses import Headers

JsonObject = dict[str, Any]


class HttpError(rpc.McpError):
    """A refusal of the HTTP layer (auth, media types, limits): ends the exchange with
    ``status``, a JSON-RPC error body (id null) and ``headers``."""

    def __init__(
        self,
        status: int,
        code: int,
        message: str,
        headers: Headers | None = None,
        data: Any = None,
    ) -> None:
        super().__init__(message, data)
        self.http_status = status
        self.code = code
        self.headers = headers


class Guard:
    def __init__(
        self,
        authenticator: Authenticator,
        *,
        limiter: RateLimiter | None = None,
        audit: AuditTrail | None = None,
    ) -> None:
        self.auth = authenticator
        self.limiter = limiter
        self.audit = audit

    async def principal(
        self, headers: dict[bytes, bytes], required: bool, method: str | None
    ) -> Principal | None:
        raw = headers.get(b"authorization")
        if raw is None and not required:
            return None
        value = raw.decode("latin-1") if raw is not None else None
        try:
            principal = await self.auth.authenticate(value)
        except AuthError as exc:
            if not required:
                return None
            self.refused(None, 401, exc.message, method)
            challenge = self.auth.challenge(exc).encode("latin-1")
            raise HttpError(
                401, rpc.SERVER_ERROR, exc.message, [(b"www-authenticate", challenge)]
            ) from None
        if self.limiter is not None and value is not None:
            wait_ms = self.limiter.check(value)
            if wait_ms is not None:
                self.refused(principal, 429, "rate limited", method)
                retry = str(max(1, (wait_ms + 999) // 1000)).encode()
                raise HttpError(
                    429,
                    rpc.RATE_LIMITED,
                    "Too many requests for this token; slow down",
                    [(b"retry-after", retry)],
                    {"retryAfterMs": wait_ms},
                )
        return principal

    def refused(
        self, principal: Principal | None, status: int, reason: str, method: str | None = None
    ) -> None:
        if self.audit is not None:
            self.audit.refused(principal, status, reason[:300], method)
