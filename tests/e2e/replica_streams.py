"""Streams through a replica set (tests/support/replicas.py), read as the replica stories
read them: a client per replica (or the proxy) and the numbered notifications of
``appdeck_test_count``, reconnecting with ``Last-Event-ID`` whenever a stream breaks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import httpx

from tests.e2e.helpers import open_get, rpc, sse_headers
from tests.support.mcp import Event, parse_sse


def http_to(origin: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(  # reads wait past the server's 30 s keepalive
        base_url=origin,
        headers={"authorization": f"Bearer {token}"},
        timeout=httpx.Timeout(15, read=45),
    )


class Numbered:
    """Reads the ``{"n": k}`` log notifications of one SSE stream (GET or a resumed POST
    stream), reconnecting through the proxy with ``Last-Event-ID`` whenever it breaks."""

    def __init__(self, http: httpx.AsyncClient, session_id: str) -> None:
        self.http = http
        self.session_id = session_id
        self.numbers: list[int] = []
        self.last_id: str | None = None
        self.responses: list[Any] = []
        self.connections = 0
        self._grew = asyncio.Event()

    async def wait_for(self, count: int, within: float) -> None:
        """Until at least ``count`` numbers arrived (read by a concurrent :meth:`read`)."""
        async with asyncio.timeout(within):
            while len(self.numbers) < count:
                self._grew.clear()
                await self._grew.wait()

    def _take(self, events: list[Event]) -> None:
        for event in events:
            if event.id:
                self.last_id = event.id
            if not event.data:
                continue
            message = event.json()
            if message.get("method") == "notifications/message":
                data = message["params"]["data"]
                if isinstance(data, dict) and "n" in data:
                    self.numbers.append(data["n"])
                    self._grew.set()
            elif "result" in message or "error" in message:
                self.responses.append(message)

    async def read(self, until: Callable[[Numbered], bool], within: float) -> None:
        """Read (and reconnect) until ``until(self)`` holds; at most ``within`` seconds."""
        async with asyncio.timeout(within):
            while not until(self):
                request_headers = sse_headers(self.session_id, self.last_id)
                async with open_get(self.http, request_headers) as response:
                    if response.status_code != 200:
                        await response.aread()
                        await asyncio.sleep(0.1)
                        continue
                    self.connections += 1
                    buffer = ""
                    with contextlib.suppress(httpx.HTTPError):
                        async for chunk in response.aiter_text():
                            buffer += chunk.replace("\r\n", "\n")
                            while "\n\n" in buffer:
                                block, buffer = buffer.split("\n\n", 1)
                                self._take(parse_sse(block + "\n\n"))
                            if until(self):
                                return


async def start_count(
    http: httpx.AsyncClient, session_id: str, count: int, per_second: float, task: bool
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": "appdeck_test_count",
        "arguments": {"count": count, "per_second": per_second},
    }
    if task:
        params["task"] = {"ttl": 120_000}
    reply: dict[str, Any] = await rpc(http, session_id, "tools/call", params, id=7)
    return reply
