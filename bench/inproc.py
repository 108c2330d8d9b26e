"""AppDeck's own per-request cost, without a server or a socket: the ASGI app called in a
loop with a prepared scope. Separates our code's cost from uvicorn's in ``run.py``'s figures.

    .venv/bin/python bench/inproc.py [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from appdeck.app import Services
from appdeck.auth import scopes
from appdeck.auth.admin import IdentityAdmin
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


async def echo(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": arguments["text"]}]}


async def main(n: int, profile: bool) -> None:
    data_dir = Path(tempfile.mkdtemp())
    settings = Settings.model_validate(
        {
            "data_dir": data_dir,
            "rate_limit_per_second": 1e9,
            "rate_limit_burst": 10**9,
            "ingress_port": 0,  # a free port: 8088 may be a running server's
        }
    )
    services = await Services.start(settings, port=8080)
    services.registry.add_tool(ToolDef("echo", "Echo", ECHO_SCHEMA, echo))
    admin = IdentityAdmin(services.identities, services.token_issuer)
    await admin.ensure_dev()
    token, _ = await admin.mint_access_token("dev", "dev", scopes.render(set(scopes.ALL)))
    app = services.asgi()

    def scope(extra: list[tuple[bytes, bytes]]) -> dict[str, Any]:
        return {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": [
                (b"host", b"127.0.0.1:8080"),
                (b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream"),
                (b"authorization", f"Bearer {token}".encode()),
                *extra,
            ],
        }

    async def call(body: bytes, extra: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope(extra), receive, send)
        return sent

    init = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
        }
    )
    out = await call(init, [])
    sid = dict(out[0]["headers"])[b"mcp-session-id"]
    extra = [(b"mcp-session-id", sid), (b"mcp-protocol-version", b"2025-11-25")]
    bodies = {
        "tools/call": orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "hello"}},
            }
        ),
        "tools/list": orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    }
    for name, body in bodies.items():
        result = await call(body, extra)
        assert b'"result"' in result[-1]["body"], result
        for _ in range(1000):
            await call(body, extra)
        prof = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if prof:
            prof.enable()
        for _ in range(n):
            await call(body, extra)
        if prof:
            prof.disable()
        elapsed = time.perf_counter() - start
        print(f"{name:12s} {elapsed / n * 1e6:7.1f} µs per request (in-process, no socket)")
        if prof:
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    await services.stop(stop_apps=True)  # HAProxy too: it outlives a plain stop


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    import uvloop

    uvloop.run(main(args.n, args.profile))
