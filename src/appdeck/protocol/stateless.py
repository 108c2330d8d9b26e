"""What the stateless era (MCP 2026-07-28) changes in the answers, beside the handshake era.

The same handlers serve both eras (they register into the handshake era's method table; the
stateless table takes the methods listed in :data:`METHODS` from it). The stateless era adds
``server/discover``, stamps every result (``resultType``, the server's identity in ``_meta``,
the caching hints of SEP-2549) and renames two errors (:func:`recode`). Pure.
"""

from __future__ import annotations

from typing import Any, Final

from appdeck.protocol import versions
from appdeck.protocol.envelope import META_SERVER_INFO
from appdeck.protocol.errors import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    McpError,
)

JsonObject = dict[str, Any]

METHODS: Final = (
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
)
"""The handshake era's methods the stateless era keeps. Gone: ``initialize``, ``ping``,
``logging/setLevel``, ``resources/subscribe`` and ``unsubscribe`` (``subscriptions/listen``
replaces them), ``tasks/result`` and ``tasks/list``: a stateless client calling them hears
404 ``-32601``. The tasks extension's ``tasks/get|update|cancel`` have their own handlers
(:mod:`appdeck.protocol.tasks_extension`)."""

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"

STATIC_TTL_MS: Final = 300_000
"""How long a client may reuse a list that changes only when the server is upgraded."""
CACHING: Final[dict[str, tuple[int, str]]] = {
    "server/discover": (STATIC_TTL_MS, "public"),
    # filtered by the caller's scopes: private to the caller
    "tools/list": (STATIC_TTL_MS, "private"),
    "prompts/list": (STATIC_TTL_MS, "private"),
    "resources/templates/list": (STATIC_TTL_MS, "private"),
    # a tenant's apps and deployments: live data
    "resources/list": (0, "private"),
    "resources/read": (0, "private"),
}
"""SEP-2549's hints per method: ``ttlMs`` and ``cacheScope``."""


def capabilities() -> JsonObject:
    """What ``server/discover`` declares: only what a stateless client is served today. The
    list changes and resource updates are delivered on ``subscriptions/listen`` streams
    (:mod:`appdeck.protocol.listen`)."""
    return {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "prompts": {"listChanged": True},
        "completions": {},
        "logging": {},
        "extensions": {TASKS_EXTENSION: {}},
    }


def discover(instructions: str | None) -> JsonObject:
    """The ``server/discover`` result (before :func:`stamp`)."""
    body: JsonObject = {
        "supportedVersions": list(versions.ALL),
        "capabilities": capabilities(),
    }
    if instructions:
        body["instructions"] = instructions
    return body


def stamp(method: str, body: JsonObject, server_info: JsonObject) -> JsonObject:
    """A handler's result as the stateless era sends it (a copy: handlers may return shared
    dicts): ``resultType`` (``complete`` unless the handler set it), ``serverInfo`` in
    ``_meta``, and the caching hints of a complete result of a cacheable method."""
    out = dict(body)
    kind = out.setdefault("resultType", "complete")
    meta = out.get("_meta")
    out["_meta"] = (
        {**meta, META_SERVER_INFO: server_info}
        if isinstance(meta, dict)
        else {META_SERVER_INFO: server_info}
    )
    hint = CACHING.get(method)
    if hint is not None and kind == "complete":
        out["ttlMs"], out["cacheScope"] = hint
    return out


def recode(exc: McpError) -> McpError:
    """An error as the stateless era sends it: an unknown resource is ``-32602`` (SEP-2164,
    ``data.uri`` kept), and an unknown method answers HTTP 404."""
    if exc.code == RESOURCE_NOT_FOUND:
        return _with(exc, INVALID_PARAMS, exc.http_status)
    if exc.code == METHOD_NOT_FOUND and exc.http_status != 404:
        return _with(exc, METHOD_NOT_FOUND, 404)
    return exc


def _with(exc: McpError, code: int, status: int) -> McpError:
    out = McpError(exc.message, exc.data)
    out.code = code
    out.http_status = status
    out.headers = exc.headers
    return out
