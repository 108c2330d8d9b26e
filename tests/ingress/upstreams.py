"""Small upstream apps for the ingress tests, served by uvicorn on 127.0.0.1 free ports.

Every upstream answers with its own name so a test can tell who served a request:

- ``/status/<code>``: that status, a JSON body;
- ``/stream?n=3&delay=0.3``: ``n`` chunks (no Content-Length), ``delay`` seconds apart;
- ``/sse?n=3&delay=0.3``: ``n`` server-sent events, ``delay`` apart (ends early if the client
  leaves: :attr:`Upstream.disconnects` counts that);
- ``/slow?delay=2``: the answer after ``delay`` (or nothing, if the client leaves first);
- ``/hop``: an answer carrying hop-by-hop headers;
- anything else: JSON echo of the request (method, path, query, headers, body size, sha256,
  the client port); the body's chunks are timestamped in :attr:`Upstream.seen`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import orjson
import uvicorn


class QuietServer(uvicorn.Server):
    """uvicorn without signal handling (the test process owns signals)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def tcp_listener() -> socket.socket:
    # IPPROTO_TCP so that asyncio turns Nagle off on accepted connections
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def dead_address() -> str:
    """A loopback address nothing listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


@dataclass
class Seen:
    """One request as the upstream saw it."""

    method: str
    path: str
    headers: list[tuple[bytes, bytes]]
    client_port: int
    chunk_times: list[float] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: bytes) -> bytes | None:
        values = [v for k, v in self.headers if k == name]
        return values[0] if values else None


async def _read_body(receive: Any, seen: Seen) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        if message.get("body"):
            seen.chunk_times.append(time.monotonic())
            seen.body += message["body"]
        if not message.get("more_body", False):
            return


async def _until_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class Upstream:
    """A test app on its own uvicorn server. ``await start()``, ``await stop()``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[Seen] = []
        self.disconnects = 0
        self.port = 0
        self._server: QuietServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Upstream:
        sock = tcp_listener()
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            interface="asgi3",
            http="httptools",
            lifespan="off",
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=1,
        )
        self._server = QuietServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        async with asyncio.timeout(5):
            while not self._server.started:  # noqa: ASYNC110 - bounded start-up poll
                await asyncio.sleep(0.005)
        return self

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        async with asyncio.timeout(5):
            await self._task

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
        seen = Seen(scope["method"], path, list(scope["headers"]), scope["client"][1])
        self.seen.append(seen)
        await _read_body(receive, seen)
        n = int(query.get("n", "3"))
        delay = float(query.get("delay", "0.3"))

        if path.startswith("/status/"):
            await self._json(send, {"upstream": self.name}, int(path.rsplit("/", 1)[1]))
        elif path in ("/stream", "/sse"):
            sse = path == "/sse"
            kind = b"text/event-stream" if sse else b"text/plain"
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", kind), (b"x-upstream", self.name.encode())],
                }
            )
            watch = asyncio.create_task(_until_disconnect(receive))
            try:
                for i in range(n):
                    if i:
                        await asyncio.wait({watch}, timeout=delay)
                        if watch.done():
                            self.disconnects += 1
                            return
                    piece = f"data: {i}\n\n" if sse else f"chunk {i} from {self.name}\n"
                    await send(
                        {"type": "http.response.body", "body": piece.encode(), "more_body": True}
                    )
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                watch.cancel()
        elif path == "/slow":
            watch = asyncio.create_task(_until_disconnect(receive))
            await asyncio.wait({watch}, timeout=delay)
            if watch.done():
                self.disconnects += 1
                return
            watch.cancel()
            await self._json(send, {"upstream": self.name})
        elif path == "/hop":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-length", b"2"),
                        (b"connection", b"x-private"),
                        (b"x-private", b"secret"),
                        (b"keep-alive", b"timeout=5"),
                        (b"proxy-authenticate", b"Basic"),
                        (b"x-public", b"yes"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b"ok"})
        else:
            await self._json(
                send,
                {
                    "upstream": self.name,
                    "method": scope["method"],
                    "path": path,
                    "query": scope["query_string"].decode(),
                    "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
                    "body_length": len(seen.body),
                    "body_sha256": hashlib.sha256(seen.body).hexdigest(),
                    "client_port": seen.client_port,
                },
            )

    async def _json(self, send: Any, body: dict[str, Any], status: int = 200) -> None:
        data = orjson.dumps(body)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    (b"x-upstream", self.name.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})
