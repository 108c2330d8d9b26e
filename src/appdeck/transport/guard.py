"""Who may use /mcp, how often, and the audit trail of what they did.

:class:`Guard` authenticates (401 with a ``WWW-Authenticate`` challenge), applies the per-token
rate limit (429 + ``-32004`` + ``retryAfterMs``), and writes an audit record for every
``tools/call`` and every refusal.
"""

from __future__ import annotations

import time
from typing import Any

from appdeck.auth import Authenticator, AuthError
from appdeck.auth.audit import AuditEvent, AuditLog
from appdeck.auth.ratelimit import RateLimiter
from appdeck.common.identity import Principal
from appdeck.protocol import errors as rpc
from appdeck.transport.responses import Headers

JsonObject = dict[str, Any]


class HttpError(Exception):
    """Ends the HTTP exchange with ``status`` and a JSON-RPC error body (id null)."""

    def __init__(
        self,
        status: int,
        code: int,
        message: str,
        headers: Headers | None = None,
        data: Any = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.data = (
            status,
            code,
            message,
            headers,
            data,
        )

    def body(self) -> JsonObject:
        error: JsonObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return {"jsonrpc": "2.0", "id": None, "error": error}


class Guard:
    def __init__(
        self,
        authenticator: Authenticator,
        *,
        limiter: RateLimiter | None = None,
        audit: AuditLog | None = None,
        resource_metadata_url: str | None = None,
    ) -> None:
        self.auth = authenticator
        self.limiter = limiter
        self.audit = audit
        self.resource_metadata_url = resource_metadata_url

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

    def insufficient_scope(self, scope: str) -> bytes:
        parts = ['Bearer error="insufficient_scope"', f'scope="{scope}"']
        if self.resource_metadata_url:
            parts.append(f'resource_metadata="{self.resource_metadata_url}"')
        return ", ".join(parts).encode("latin-1")

    def refused(
        self,
        principal: Principal | None,
        status: int,
        reason: str,
        method: str | None = None,
        tool: str | None = None,
    ) -> None:
        if self.audit is None:
            return
        self.audit.record(
            AuditEvent(
                event="refused",
                outcome="denied",
                tenant_id=principal.tenant if principal else None,
                user_id=principal.user if principal else None,
                client_id=principal.client_id if principal else None,
                method=method,
                tool=tool,
                status=status,
                detail={"reason": reason[:300]},
            )
        )

    def answered(
        self,
        principal: Principal | None,
        request: JsonObject,
        response: JsonObject | None,
        status: int,
        started: float,
    ) -> None:
        """Audit one answered request: tools/call always, refusals of any method.

        On the hot path: builds the row directly (no dataclass round trip)."""
        audit = self.audit
        if audit is None:
            return
        method = request["method"]
        params = request.get("params") or {}
        tool = params.get("name") if method == "tools/call" else None
        error = response.get("error") if response is not None else None
        if status in (401, 403, 429) and error is not None:
            self.refused(principal, status, str(error.get("message", "")), method, tool)
            return
        if method != "tools/call":
            return
        arguments = params.get("arguments")
        if not isinstance(arguments, dict):
            arguments = {}
        result = response.get("result") if response is not None else None
        failed = error is not None or (result is not None and result.get("isError") is True)
        action = arguments.get("action")
        app_id = arguments.get("app_id")
        audit.record_row(
            {
                "ts": time.time(),
                "tenant_id": principal.tenant if principal else None,
                "user_id": principal.user if principal else None,
                "client_id": principal.client_id if principal else None,
                "event": "tool_call",
                "method": "tools/call",
                "tool": tool if type(tool) is str else None,
                "action": action if type(action) is str else None,
                "app_id": app_id if type(app_id) is int else None,
                "outcome": "error" if failed else "ok",
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                "request_id": str(request["id"]),
                "detail": {"task": True} if result is not None and "task" in result else None,
            }
        )
