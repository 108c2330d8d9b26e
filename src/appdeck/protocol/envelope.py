"""The stateless era's envelope (MCP 2026-07-28): which era a POST speaks, and what a stateless
request must carry before any handler runs. Pure: dicts and header bytes in, a decision out.

Which era (:func:`is_stateless`), decided per POST, first match wins:

    ``Mcp-Session-Id`` sent                         handshake era (a session is named)
    ``MCP-Protocol-Version`` of the handshake era   handshake era
    ``MCP-Protocol-Version`` anything else          stateless (an unknown version hears -32022,
                                                    listing every version, so a dual-era client
                                                    can fall back to ``initialize``)
    no version header, ``params._meta`` names one   stateless (and refused: the header is missing)
    otherwise                                       handshake era, as 2025-03-26 (the default)

A stateless request passes three rungs, in the order the official SDK checks them (the first
that fails is the answer; every refusal echoes the request's id when it has a readable one):

    rung                                                            refusal
    ──────────────────────────────────────────────────────────────  ──────────────────────────
    one JSON-RPC request or notification (no batch, no response)    400 -32600
    ``params._meta`` with protocolVersion and clientCapabilities     400 -32602
    ``MCP-Protocol-Version`` = that version, ``Mcp-Method`` = the    400 -32020
      method, ``Mcp-Name`` = ``params.name``/``uri``/``taskId``
      (trimmed; ``=?base64?…?=`` decoded) where the method has one
    the version is one of the stateless era's                       400 -32022 (+ supported)
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Final

from appdeck.protocol import versions
from appdeck.protocol.errors import (
    HeaderMismatch,
    InvalidParams,
    InvalidRequest,
    McpError,
    VersionUnsupported,
)
from appdeck.protocol.jsonrpc import Kind, RequestId, classify
from appdeck.protocol.levels import LOG_RANK

JsonObject = dict[str, Any]

META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"

NAMED_BY: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
"""The body field ``Mcp-Name`` repeats, per method (SEP-2243 and the tasks extension)."""

_HANDSHAKE_BYTES: Final = frozenset(v.encode() for v in versions.SUPPORTED)
_OWS: Final = " \t"
MAX_HEADER_VALUE: Final = 4096


class InvalidMeta(InvalidParams):
    """``params._meta`` lacks what the stateless era requires of every request."""

    http_status = 400


@dataclass(frozen=True, slots=True)
class Peer:
    """What one stateless request says of its client: the era's replacement for a session."""

    protocol_version: str
    capabilities: JsonObject
    client_info: JsonObject | None = None
    log_level: str | None = None
    """None: the client asked for no log messages (none are sent)."""

    def declares(self, capability: str) -> bool:
        return isinstance(self.capabilities.get(capability), dict)

    def declares_extension(self, name: str) -> bool:
        extensions = self.capabilities.get("extensions")
        return isinstance(extensions, dict) and isinstance(extensions.get(name), dict)


@dataclass(frozen=True, slots=True)
class Envelope:
    """A stateless request (or notification) that passed every rung."""

    message: JsonObject
    kind: Kind
    peer: Peer


@dataclass(frozen=True, slots=True)
class Refused:
    """A stateless request refused before dispatch, with the id to echo (None: unreadable)."""

    request_id: RequestId | None
    error: McpError


def is_stateless(session_header: bytes | None, version_header: bytes | None, data: object) -> bool:
    """Whether a POST speaks the stateless era (see the module docstring)."""
    if session_header is not None:
        return False
    if version_header is not None:
        return version_header.strip(b" \t") not in _HANDSHAKE_BYTES
    if type(data) is not dict:
        return False
    params = data.get("params")
    if type(params) is not dict:
        return False
    meta = params.get("_meta")
    return type(meta) is dict and META_VERSION in meta


def _readable_id(data: JsonObject) -> RequestId | None:
    value = data.get("id")
    if isinstance(value, bool):
        return None
    return value if isinstance(value, (int, str)) else None


def header_value(raw: bytes) -> str | None:
    """A routing header's value as the body would spell it: optional whitespace trimmed, a
    ``=?base64?…?=`` value decoded (strict: padding and alphabet), UTF-8. None: undecodable."""
    if len(raw) > MAX_HEADER_VALUE:
        return None
    try:
        text = raw.decode("ascii").strip(_OWS)
    except UnicodeDecodeError:
        return None  # a header value outside ASCII must come base64-encoded
    if text.startswith("=?base64?") and text.endswith("?=") and len(text) >= 11:
        try:
            return base64.b64decode(text[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
    return text


def read(
    data: object,
    version_header: bytes | None,
    method_header: bytes | None,
    name_header: bytes | None,
) -> Envelope | Refused:
    """Check a parsed stateless POST body against its headers (rungs in the module docstring)."""
    if type(data) is not dict:
        return Refused(None, InvalidRequest("Invalid Request: send one JSON-RPC object (no batch)"))
    request_id = _readable_id(data)
    try:
        kind = classify(data)
    except InvalidRequest as exc:
        return Refused(request_id, exc)
    if kind is Kind.RESPONSE:
        return Refused(
            None, InvalidRequest("Invalid Request: the server sends no requests in this era")
        )
    method: str = data["method"]
    params = data.get("params")
    meta = params.get("_meta") if type(params) is dict else None
    if type(meta) is not dict:
        return Refused(request_id, InvalidMeta("params._meta is required in protocol 2026-07-28"))
    version = meta.get(META_VERSION)
    if version is None:
        return Refused(request_id, InvalidMeta(f"params._meta is missing {META_VERSION}"))
    capabilities = meta.get(META_CAPABILITIES)
    if type(capabilities) is not dict:
        return Refused(
            request_id, InvalidMeta(f"params._meta is missing {META_CAPABILITIES} (an object)")
        )
    mismatch = _header_mismatch(version, method, params, version_header, method_header, name_header)
    if mismatch is not None:
        return Refused(request_id, HeaderMismatch(mismatch))
    if not isinstance(version, str) or version not in versions.MODERN_SUPPORTED:
        return Refused(request_id, VersionUnsupported(str(version), versions.ALL))
    info = meta.get(META_CLIENT_INFO)
    level = meta.get(META_LOG_LEVEL)
    if level is not None and level not in LOG_RANK:
        return Refused(request_id, InvalidParams(f"Invalid log level in _meta: {str(level)[:20]}"))
    peer = Peer(version, capabilities, info if type(info) is dict else None, level)
    return Envelope(data, kind, peer)


def _header_mismatch(
    version: object,
    method: str,
    params: Any,
    version_header: bytes | None,
    method_header: bytes | None,
    name_header: bytes | None,
) -> str | None:
    if version_header is None:
        return "the MCP-Protocol-Version header is required"
    if header_value(version_header) != version:
        return "the MCP-Protocol-Version header does not match params._meta's protocolVersion"
    if method_header is None:
        return "the Mcp-Method header is required"
    if header_value(method_header) != method:
        return "the Mcp-Method header does not match the body's method"
    field = NAMED_BY.get(method)
    if field is None:
        return None
    value = params.get(field) if type(params) is dict else None
    if not isinstance(value, str):
        return None  # the handler refuses the params; there is nothing to match
    if name_header is None:
        return f"the Mcp-Name header is required for {method} (params.{field})"
    if header_value(name_header) != value:
        return f"the Mcp-Name header does not match params.{field}"
    return None
