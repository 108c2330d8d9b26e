"""A load balancer for the replica tests: no sticky sessions, on purpose.

POSTs and DELETEs go round-robin over the replicas; GETs go to one pinned replica (the
"C" of the issue's must-show) unless it refuses the connection; a refused connection moves on
to the next replica, as a real balancer's health check would. Responses, SSE included, are
streamed through as they arrive; when a replica dies mid-stream the client's response ends
there (the client resumes with ``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn

HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"te",
    b"trailer",
    b"upgrade",
    b"proxy-authorization",
    b"proxy-authenticate",
    b"content-length",
}


@dataclass
class Routed:
    method: str
    upstream: str
    status: int
    what: str = ""
    """For a JSON-RPC POST: ``request:<method>``, ``notification:<method>`` or ``response``."""


def _what(body: bytes) -> str:
    try:
        message = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(message, dict):
        return ""
    if "method" in message:
        kind = "request" if "id" in message else "notification"
        return f"{kind}:{message['method']}"
    return "response" if "result" in message or "error" in message else ""


@dataclass
class ReplicaProxy:
    upstreams: list[str] = field(default_factory=list)
    """Origins (``http://127.0.0.1:PORT``) of the replicas, in order: A, B, C..."""
    pinned_get: int = -1
    """Which upstream GETs go to first (default: the last one, C)."""
    routed: list[Routed] = field(default_factory=list)
    _next: int = 0
    _client: httpx.AsyncClient | None = None

    def _order(self, method: str) -> list[str]:
        count = len(self.upstreams)
        if method == "GET":
            first = self.pinned_get % count
        else:
            first = self._next % count
            self._next += 1
        return [self.upstreams[(first + i) % count] for i in range(count)]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP]
        target = scope["raw_path"].decode() if scope.get("raw_path") else scope["path"]
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode()
        assert self._client is not None
        for upstream in self._order(scope["method"]):
            request = self._client.build_request(
                scope["method"], upstream + target, headers=headers, content=body
            )
            try:
                response = await self._client.send(request, stream=True)
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                continue  # a dead replica: the next one answers
            what = _what(body) if scope["method"] == "POST" else ""
            self.routed.append(Routed(scope["method"], upstream, response.status_code, what))
            await self._relay(response, receive, send)
            return
        await send({"type": "http.response.start", "status": 502, "headers": []})
        await send({"type": "http.response.body", "body": b"no replica answered"})

    async def _relay(self, response: httpx.Response, receive: Any, send: Any) -> None:
        out = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            await response.aclose()  # the client left: drop the replica's stream too

        watcher = asyncio.create_task(watch())
        try:
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": out}
            )
            with contextlib.suppress(httpx.HTTPError, RuntimeError):
                async for chunk in response.aiter_raw():
                    if gone.is_set():
                        break
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            await response.aclose()


@contextlib.asynccontextmanager
async def serve_proxy(proxy: ReplicaProxy) -> AsyncIterator[str]:
    """Run ``proxy`` on a loopback port; yields its origin ``http://127.0.0.1:PORT``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on: no need to wait for uvicorn to start
    port = sock.getsockname()[1]
    config = uvicorn.Config(  # log_config=None: leave the test process's logging alone
        proxy, log_config=None, lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    timeout = httpx.Timeout(connect=2.0, read=None, write=10.0, pool=10.0)
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        proxy._client = client
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            try:
                async with asyncio.timeout(5):
                    await task
            except TimeoutError:
                task.cancel()
            sock.close()
