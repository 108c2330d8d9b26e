"""Who may use /mcp and how often.

:class:`Guard` authenticates (401 with a ``WWW-Authenticate`` challenge) and applies two limits,
both answered with 429 + ``Retry-After`` + ``-32004`` + ``retryAfterMs``:

- **per token**, keyed on the *verified* token (:attr:`Principal.token_id`: an access token's
  ``jti``, a PAT's id), never on the raw header, so ``bEaReR`` or extra spaces share one bucket;
- **per client IP on failed authentication** (:class:`~appdeck.auth.throttle.FailureThrottle`):
  past a few 401s an address waits, longer each time, before anything it sends is looked at.

Each refusal goes to the audit trail, with the client IP as its source (the trail aggregates
them per minute). What callers then do is audited by the protocol core itself.
"""

from __future__ import annotations

from typing import Any

from appdeck.auth import Authenticator, AuthError
from appdeck.auth.ratelimit import TokenBuckets
from appdeck.auth.throttle import FailureThrottle
from appdeck.common.identity import Principal
from appdeck.observability import mcp as metrics
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


def _too_many(message: str, wait_ms: int) -> HttpError:
    retry = str(max(1, (wait_ms + 999) // 1000)).encode()
    return HttpError(
        429, rpc.RATE_LIMITED, message, [(b"retry-after", retry)], {"retryAfterMs": wait_ms}
    )


def rate_key(principal: Principal) -> str:
    """The rate limit's bucket: the verified token, else (no token id) the (tenant, user)."""
    return principal.token_id or f"user:{principal.tenant}\x00{principal.user}"


class Guard:
    def __init__(
        self,
        authenticator: Authenticator,
        *,
        limiter: TokenBuckets | None = None,
        audit: AuditTrail | None = None,
        failures: FailureThrottle | None = None,
    ) -> None:
        self.auth = authenticator
        self.limiter = limiter
        self.audit = audit
        self.failures = failures

    async def principal(
        self,
        headers: dict[bytes, bytes],
        required: bool,
        method: str | None,
        client: str | None = None,
    ) -> Principal | None:
        """The caller, or None when no token is ``required`` and none (or a bad one) is sent.
        ``client`` is the peer's IP address (the ASGI scope's; proxy headers are not trusted)."""
        raw = headers.get(b"authorization")
        if raw is None and not required:
            return None
        if required and client is not None and self.failures is not None:
            wait = self.failures.blocked(client)
            if wait is not None:
                self.refused(None, 429, "too many failed authentications", method, client)
                metrics.refused("auth_throttled")
                raise _too_many(
                    "Too many failed authentications from this address; retry later", wait * 1000
                )
        value = raw.decode("latin-1") if raw is not None else None
        try:
            principal = await self.auth.authenticate(value)
        except AuthError as exc:
            if not required:
                return None
            self.refused(None, 401, exc.message, method, client)
            metrics.refused("unauthenticated")
            if client is not None and self.failures is not None:
                self.failures.failed(client)
            challenge = self.auth.challenge(exc).encode("latin-1")
            raise HttpError(
                401, rpc.SERVER_ERROR, exc.message, [(b"www-authenticate", challenge)]
            ) from None
        if self.limiter is not None and value is not None:
            wait_ms = await self.limiter.take(rate_key(principal))
            if wait_ms is not None:
                self.refused(principal, 429, "rate limited", method, client)
                metrics.refused("rate_limited")
                raise _too_many("Too many requests for this token; slow down", wait_ms)
        return principal

    def refused(
        self,
        principal: Principal | None,
        status: int,
        reason: str,
        method: str | None = None,
        client: str | None = None,
    ) -> None:
        if self.audit is not None:
            self.audit.refused(principal, status, reason[:300], method, source=client)
