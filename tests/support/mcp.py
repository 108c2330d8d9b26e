"""Small helpers for driving /mcp over HTTP in tests: JSON-RPC posts and SSE parsing."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from appdeck.auth import AuthError
from appdeck.common.identity import Principal

ACCEPT_BOTH = "application/json, text/event-stream"


def headers(session: str | None = None, token: str | None = None, **extra: str) -> dict[str, str]:
    out = {"accept": ACCEPT_BOTH, "content-type": "application/json"}
    if session:
        out["mcp-session-id"] = session
        out["mcp-protocol-version"] = "2025-11-25"
    if token:
        out["authorization"] = f"Bearer {token}"
    out.update({k.replace("_", "-"): v for k, v in extra.items()})
    return out


def request(method: str, params: dict[str, Any] | None = None, id: int | str = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "tests", "version": "1"},
}


async def initialize(
    client: httpx.AsyncClient, token: str | None = None, version: str = "2025-11-25"
) -> str:
    params = dict(INIT, protocolVersion=version)
    r = await client.post("/mcp", json=request("initialize", params), headers=headers(token=token))
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    assert r.json()["result"]["sessionId"] == sid
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r2 = await client.post("/mcp", json=note, headers=headers(sid, token))
    assert r2.status_code == 202
    return sid


@dataclass
class Event:
    id: str | None
    data: str
    retry: int | None = None

    def json(self) -> Any:
        return orjson.loads(self.data)


def parse_sse(text: str) -> list[Event]:
    events: list[Event] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if not block.strip() or block.startswith(":"):
            continue
        eid: str | None = None
        retry: int | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("id:"):
                eid = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif line.startswith("retry:"):
                retry = int(line[6:].strip())
        events.append(Event(eid, "\n".join(data), retry))
    return events


async def sse_events(response: httpx.Response, count: int) -> AsyncIterator[Event]:
    """Yield events from a streaming response until ``count`` arrived (the caller bounds time)."""
    buffer = ""
    seen = 0
    async for chunk in response.aiter_text():
        buffer += chunk
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            for event in parse_sse(block + "\n\n"):
                yield event
                seen += 1
                if seen >= count:
                    return


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TokenTable:
    """A test authenticator: a fixed table of bearer tokens."""

    def __init__(self, tokens: dict[str, Principal]) -> None:
        self.tokens = tokens

    async def authenticate(self, authorization: str | None) -> Principal:
        if not authorization or not authorization.startswith("Bearer "):
            raise AuthError("missing bearer token")
        principal = self.tokens.get(authorization[7:])
        if principal is None:
            raise AuthError("invalid token")
        return principal

    def challenge(self, error: AuthError | None = None) -> str:
        return 'Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"'
