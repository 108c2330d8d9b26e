"""The inbound step: what a POSTed body asks of the core, decided before any I/O.

The transport parses the body (JSON) and hands it here with the two MCP headers;
:func:`read` answers with a :class:`Route` or a rejection, an :class:`McpError` whose
``http_status`` (and ``headers``) end the HTTP exchange. The transport only maps the answer to
HTTP. Pure: no I/O, no framework, no clock; the tests drive it with dicts.

The rules, in the order they apply (the first that fails is the answer):

    rule                                                rejection
    ──────────────────────────────────────────────────  ──────────────────────────────────────
    MCP-Protocol-Version, when sent, is one we speak     400 -32000 UnsupportedVersion
    a batch is not empty                                 400 -32600 InvalidRequest
    every message is a JSON-RPC 2.0 message              400 -32600 InvalidRequest
    initialize comes alone (never in a batch)            400 -32600 InvalidRequest
      ─ the transport authenticates when ``Route.needs_token`` (401 / 429 are its own) ─
    a session-bound message carries Mcp-Session-Id       400 -32000 SessionRequired  ┐ McpServer
    the session exists                                   404 -32001 SessionNotFound  │ .open()
    the session belongs to the caller (else dropped)     403 -32003 Forbidden        ┘
    a batch comes on a 2025-03-26 session only           400 -32600 InvalidRequest   (admit)

Who needs what: every message needs a token except the open methods (``ping``,
``notifications/initialized``); every message needs a session except ``initialize`` and a lone
``ping`` sent without a session header (a liveness check answers even before initialize).
The token comes before the session header: a caller without a token hears 401 and its
challenge, which is what starts an OAuth client's sign-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from appdeck.protocol import versions
from appdeck.protocol.errors import InvalidRequest, McpError, UnsupportedVersion
from appdeck.protocol.jsonrpc import Kind, classify

JsonObject = dict[str, Any]

OPEN_METHODS: Final = frozenset({"ping", "notifications/initialized"})
"""Methods that need no token (the interface document marks them open)."""

_SUPPORTED_BYTES: Final = frozenset(v.encode() for v in versions.SUPPORTED)
_SUPPORTED_LIST: Final = ", ".join(sorted(versions.SUPPORTED, reverse=True))
_REQUEST: Final = Kind.REQUEST
_RESPONSE: Final = Kind.RESPONSE


@dataclass(slots=True)
class Route:
    """What one POST carries and what it needs before the core may handle it."""

    messages: list[JsonObject]
    kinds: list[Kind]
    batch: bool
    needs_token: bool
    """False only when every message is an open method."""
    session_id: str | None
    """The ``Mcp-Session-Id`` header, as sent (None when absent)."""
    wants_session: bool
    """False for ``initialize`` and for a lone ``ping`` sent without a session header."""
    label: str | None
    """What an auth refusal is recorded as: the method, ``batch``, or None for a response."""


def version_rejection(raw: bytes | None) -> McpError | None:
    """The rejection of an ``MCP-Protocol-Version`` header we do not speak (None: fine).

    Checked for being supported, not for matching the session's version (see docs/decisions)."""
    if raw is None or raw in _SUPPORTED_BYTES:
        return None
    return UnsupportedVersion(
        f"Bad Request: Unsupported protocol version: {raw.decode('latin-1')[:40]} "
        f"(supported versions: {_SUPPORTED_LIST})"
    )


def read(
    data: object, session_header: bytes | None, version_header: bytes | None
) -> Route | McpError:
    """Route a parsed POST body, or reject it (see the rules in the module docstring)."""
    if version_header is not None:
        rejection = version_rejection(version_header)
        if rejection is not None:
            return rejection
    session_id = session_header.decode("latin-1") if session_header is not None else None
    if type(data) is dict:  # the common case: one message, no batch
        try:
            kind = classify(data)
        except InvalidRequest as exc:
            return exc
        if kind is _RESPONSE:
            return Route([data], [kind], False, True, session_id, True, None)
        method: str = data["method"]
        is_init = kind is _REQUEST and method == "initialize"
        lone_ping = kind is _REQUEST and method == "ping" and session_id is None
        return Route(
            [data],
            [kind],
            False,
            method not in OPEN_METHODS,
            session_id,
            not (is_init or lone_ping),
            method,
        )
    if not isinstance(data, list):
        return InvalidRequest("Invalid Request: a JSON-RPC message must be an object")
    if not data:
        return InvalidRequest("Invalid Request: empty batch")
    kinds: list[Kind] = []
    needs_token = False
    has_init = False
    for message in data:
        try:
            kind = classify(message)
        except InvalidRequest as exc:
            return exc
        kinds.append(kind)
        if kind is _RESPONSE:
            needs_token = True
            continue
        name = message["method"]
        has_init = has_init or (kind is _REQUEST and name == "initialize")
        needs_token = needs_token or name not in OPEN_METHODS
    if has_init and len(data) > 1:
        return InvalidRequest("Invalid Request: Only one initialization request is allowed")
    if len(data) == 1:  # a batch of one is answered as a batch, but routed like one message
        one = read(data[0], session_header, None)
        if isinstance(one, McpError):
            return one
        one.batch = True
        return one
    return Route(data, kinds, True, needs_token, session_id, True, "batch")


def admit(route: Route, session_version: str | None) -> McpError | None:
    """The last rule, once the session is known: batches only on 2025-03-26 sessions
    (a batch without a session is judged by the latest version)."""
    if not route.batch:
        return None
    version = session_version or versions.LATEST
    if versions.allows_batches(version):
        return None
    return InvalidRequest(
        "Invalid Request: JSON-RPC batches are not supported in protocol version " + version
    )
