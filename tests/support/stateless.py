"""Talking to AppDeck as a stateless (MCP 2026-07-28) client: ``_meta`` and routing headers on
every request, no session."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import httpx

from appdeck.protocol.envelope import NAMED_BY
from tests.support.mcp import headers, request

VERSION = "2026-07-28"
_ids = itertools.count(1)


def body(
    method: str,
    params: dict[str, Any] | None = None,
    rid: Any = None,
    capabilities: dict[str, Any] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    """A stateless request: ``params`` plus the ``_meta`` every request carries (``meta``
    adds ``io.modelcontextprotocol/<key>`` entries, e.g. ``logLevel``)."""
    out = dict(params or {})
    out["_meta"] = {
        **(out.get("_meta") or {}),
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        **{f"io.modelcontextprotocol/{k}": v for k, v in meta.items()},
    }
    return request(method, out, next(_ids) if rid is None else rid)


def routing(method: str, name: str | None = None, token: str | None = None) -> dict[str, str]:
    """The HTTP headers of a stateless request."""
    out = headers(token=token, **{"mcp-protocol-version": VERSION, "mcp-method": method})
    if name is not None:
        out["mcp-name"] = name
    return out


@dataclass
class StatelessCaller:
    client: httpx.AsyncClient
    token: str
    capabilities: dict[str, Any] = field(default_factory=dict)

    async def post(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        named = NAMED_BY.get(method)
        name = (params or {}).get(named) if named else None
        return await self.client.post(
            "/mcp",
            json=body(method, params, capabilities=self.capabilities),
            headers=routing(method, name if isinstance(name, str) else None, self.token),
        )

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        r = await self.post(method, params)
        return dict(r.json())

    async def call(self, tool: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """A tools/call's whole JSON-RPC reply (``extra``: inputResponses, requestState)."""
        return await self.rpc("tools/call", {"name": tool, "arguments": arguments, **extra})
