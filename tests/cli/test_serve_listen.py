"""`appdeck serve` ending a `subscriptions/listen` stream on SIGTERM, through a real process:
the stream gets its JSON-RPC response (the spec's graceful closure) before uvicorn waits for
its connections, and the process exits 0."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.support.appdeck_process import reap_haproxy, start_appdeck
from tests.support.mcp import headers, request
from tests.support.wait import until

V = "2026-07-28"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


async def test_sigterm_ends_a_listen_stream_with_its_complete_response(tmp_path: Path) -> None:
    server = await start_appdeck(tmp_path / "data", log_dir=tmp_path / "logs")
    frames: list[dict[str, Any]] = []
    try:
        assert server.token
        meta = {
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        body = request(
            "subscriptions/listen",
            {"notifications": {"toolsListChanged": True}, "_meta": meta},
            "L9",
        )
        out = headers(
            token=server.token,
            **{"mcp-protocol-version": V, "mcp-method": "subscriptions/listen"},
        )

        async def read() -> None:
            async with (
                httpx.AsyncClient(base_url=server.origin, timeout=None) as http,
                http.stream("POST", "/mcp", json=body, headers=out) as r,
            ):
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        frames.append(orjson.loads(line[5:]))

        reader = asyncio.create_task(read())
        await until(lambda: frames or reader.done(), within=30)
        assert frames[0]["method"] == "notifications/subscriptions/acknowledged"
        code = await server.stop()
        async with asyncio.timeout(30):
            await reader  # the stream ended: the server closed it
    finally:
        await server.kill()
        reap_haproxy(tmp_path)
    assert code == 0
    last = frames[-1]
    assert last["id"] == "L9"
    assert last["result"]["resultType"] == "complete"
    assert last["result"]["_meta"][SUBSCRIPTION_ID] == "L9"
