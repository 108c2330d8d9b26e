"""Every error code AppDeck puts on the wire, and the one place exceptions become wire errors.

    McpError                         a JSON-RPC error object, code + message (+ data)
    ├── ParseError          -32700   the body is not JSON
    ├── InvalidRequest      -32600   JSON, but not a valid JSON-RPC message / call in this state
    ├── MethodNotFound      -32601   no such method (or a task-support mismatch, per the spec)
    ├── InvalidParams       -32602   the params do not fit the method
    ├── InternalError       -32603   a defect; never carries library text
    ├── SessionRequired     -32000   a session-bound call without ``Mcp-Session-Id`` (HTTP 400)
    ├── SessionNotFound     -32001   an unknown or expired session id (HTTP 404)
    ├── UnsupportedVersion  -32000   an ``MCP-Protocol-Version`` header we do not speak (HTTP 400)
    ├── ServerBusy          -32000   a server-side cap was reached (HTTP 503)
    ├── ResourceNotFound    -32002   resources/read of an unknown URI (``data.uri``)
    ├── Forbidden           -32003   session owner mismatch, or a resource the caller may not read
    │   └── InsufficientScope        the token lacks a tool's scope (HTTP 403 + step-up header)
    ├── RateLimited         -32004   too many requests (``data.retryAfterMs``, HTTP 429)
    ├── TooManyStreams      -32004   a user's cap of open listen streams (``data.maxStreams``, 429)
    │   ─ the stateless era (2026-07-28) ─
    ├── HeaderMismatch      -32020   a routing header missing or unlike the body (HTTP 400)
    ├── MissingCapability   -32021   the request needs a client capability it did not declare
    └── VersionUnsupported  -32022   ``_meta`` names a version we do not speak (``data.supported``)

An error that ends an HTTP exchange says so itself: ``http_status`` and ``headers`` (the step-up
``WWW-Authenticate``, ``Retry-After``), so the transport maps it without reading the body.

Domain errors (:mod:`appdeck.common.errors`) raised by a tool become a CallToolResult with
``isError: true`` through :func:`tool_error_result`; anything else a tool raises becomes an
``internal`` tool error whose message carries no library text.
"""

from __future__ import annotations

from typing import Any, Final

from appdeck.common.errors import AppDeckError

PARSE_ERROR: Final = -32700
"""Invalid JSON was received."""
INVALID_REQUEST: Final = -32600
"""The JSON sent is not a valid request object, or the request is not allowed in this state."""
METHOD_NOT_FOUND: Final = -32601
"""The method does not exist or is not available."""
INVALID_PARAMS: Final = -32602
"""Invalid method parameters."""
INTERNAL_ERROR: Final = -32603
"""Internal JSON-RPC error."""
SERVER_ERROR: Final = -32000
"""Transport-level refusal (missing session header, server at capacity), as the SDKs use it."""
SESSION_NOT_FOUND: Final = -32001
"""The session id is unknown or expired; the client must initialize again."""
RESOURCE_NOT_FOUND: Final = -32002
"""resources/read of a URI the server does not have."""
FORBIDDEN: Final = -32003
"""The session belongs to another owner, or the caller may not read this resource."""
RATE_LIMITED: Final = -32004
"""Too many requests; ``data.retryAfterMs`` says when to try again."""
HEADER_MISMATCH: Final = -32020
"""2026-07-28: ``MCP-Protocol-Version``, ``Mcp-Method`` or ``Mcp-Name`` missing or unlike the
body."""
MISSING_CLIENT_CAPABILITY: Final = -32021
"""2026-07-28: serving the request needs a capability the request's ``_meta`` did not declare."""
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
"""2026-07-28: the request's version is not one this server speaks."""


class McpError(Exception):
    """An error that is sent as a JSON-RPC error object.

    ``http_status`` is the status the transport uses when the error ends the whole HTTP
    exchange (as opposed to one response inside a batch or an SSE stream).
    """

    code: int = INTERNAL_ERROR
    http_status: int = 200
    headers: list[tuple[bytes, bytes]] | None = None
    """Extra HTTP response headers when this error is the whole HTTP answer."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def to_error(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


class ParseError(McpError):
    """The body could not be parsed as JSON."""

    code = PARSE_ERROR
    http_status = 400


class InvalidRequest(McpError):
    """Not a valid JSON-RPC message, or not allowed at this point of the lifecycle."""

    code = INVALID_REQUEST
    http_status = 400


class MethodNotFound(McpError):
    """Unknown method, or a tool's task support forbids how it was called."""

    code = METHOD_NOT_FOUND


class InvalidParams(McpError):
    """The params do not fit the method."""

    code = INVALID_PARAMS


class InternalError(McpError):
    """A defect on our side. The message is generic."""

    code = INTERNAL_ERROR
    http_status = 500


class SessionRequired(McpError):
    """A call after initialize came without ``Mcp-Session-Id``."""

    code = SERVER_ERROR
    http_status = 400


class SessionNotFound(McpError):
    """The session id is unknown, expired or was dropped."""

    code = SESSION_NOT_FOUND
    http_status = 404


class UnsupportedVersion(McpError):
    """An ``MCP-Protocol-Version`` header naming a version this server does not speak."""

    code = SERVER_ERROR
    http_status = 400


class ServerBusy(McpError):
    """A server-side cap (sessions, streams) was reached."""

    code = SERVER_ERROR
    http_status = 503


class ResourceNotFound(McpError):
    """resources/read of an unknown URI."""

    code = RESOURCE_NOT_FOUND

    def __init__(self, uri: str) -> None:
        super().__init__("Resource not found", {"uri": uri})


class Forbidden(McpError):
    """Session owner mismatch (the session has been dropped), or an unreadable resource."""

    code = FORBIDDEN
    http_status = 403

    def __init__(self, message: str = "forbidden", data: Any = None) -> None:
        super().__init__(message, data)


class RateLimited(McpError):
    """Too many requests from this token."""

    code = RATE_LIMITED
    http_status = 429

    def __init__(self, retry_after_ms: int) -> None:
        super().__init__("rate limited", {"retryAfterMs": retry_after_ms})


class TooManyStreams(McpError):
    """The caller already holds as many ``subscriptions/listen`` streams as one user may."""

    code = RATE_LIMITED
    http_status = 429

    def __init__(self, message: str, max_streams: int) -> None:
        super().__init__(message, {"maxStreams": max_streams})


class HeaderMismatch(McpError):
    """A routing header of the stateless era is missing, malformed or unlike the body."""

    code = HEADER_MISMATCH
    http_status = 400


class MissingCapability(McpError):
    """Serving the request needs client capabilities its ``_meta`` did not declare:
    ``data.requiredCapabilities`` is shaped like ClientCapabilities (``{"sampling": {}}``)."""

    code = MISSING_CLIENT_CAPABILITY
    http_status = 400

    def __init__(self, message: str, required: dict[str, Any]) -> None:
        super().__init__(message, {"requiredCapabilities": required})


class VersionUnsupported(McpError):
    """A stateless-era request at a version we do not speak: ``data`` lists what we do."""

    code = UNSUPPORTED_PROTOCOL_VERSION
    http_status = 400

    def __init__(self, requested: str, supported: tuple[str, ...]) -> None:
        super().__init__(
            f"Unsupported protocol version: {requested[:40]}",
            {"supported": list(supported), "requested": requested[:40]},
        )


def from_domain(exc: AppDeckError) -> McpError:
    """A domain error raised outside a tool (prompts/get, completion...) as a JSON-RPC error:
    the caller's mistakes are -32602, a permission is -32003, the rest -32603."""
    from appdeck.common.errors import PermissionDenied

    data = {"code": exc.code, **({"hint": exc.hint} if exc.hint else {})}
    if isinstance(exc, PermissionDenied):
        return Forbidden(exc.message, data)
    if exc.code in ("invalid_argument", "not_found", "failed_precondition", "conflict"):
        return InvalidParams(exc.message, data)
    return InternalError("Internal error")


def error_response(request_id: Any, exc: BaseException) -> dict[str, Any]:
    """The JSON-RPC error response for ``exc``. Only :class:`McpError` text reaches the wire."""
    if isinstance(exc, AppDeckError):
        exc = from_domain(exc)
    internal = InternalError("Internal error")
    error = exc.to_error() if isinstance(exc, McpError) else internal.to_error()
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def tool_error_result(exc: BaseException) -> dict[str, Any]:
    """The CallToolResult for a tool that failed. Domain errors keep their code and message."""
    err = exc if isinstance(exc, AppDeckError) else None
    body = err.to_dict() if err else {"code": "internal", "message": "internal error"}
    text = f"{body['code']}: {body['message']}"
    if body.get("hint"):
        text += f" (hint: {body['hint']})"
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"error": body},
        "isError": True,
    }


class InsufficientScope(Forbidden):
    """The token lacks the scope a method or tool needs: HTTP 403 with the step-up challenge
    ``WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`` (RFC 6750 §3.1)."""

    def __init__(self, scope: str, resource_metadata_url: str | None = None) -> None:
        super().__init__(
            f"insufficient_scope: this call needs the '{scope}' scope", {"scope": scope}
        )
        self.scope = scope
        challenge = f'Bearer error="insufficient_scope", scope="{scope}"'
        if resource_metadata_url:
            challenge += f', resource_metadata="{resource_metadata_url}"'
        self.headers = [(b"www-authenticate", challenge.encode("latin-1"))]


def wire_error(error: dict[str, Any]) -> McpError:
    """Rebuild an error stored as a JSON-RPC error object (a task's outcome)."""
    exc = McpError(str(error.get("message", "error")), error.get("data"))
    exc.code = int(error.get("code", INTERNAL_ERROR))
    return exc
