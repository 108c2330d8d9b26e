"""The HTTP side of a ``subscriptions/listen`` request (MCP 2026-07-28): an SSE stream that
stays open.

The protocol core's handler (:class:`appdeck.protocol.listen.ListenFeature`) writes the ack
and the notifications through this channel, and returns when the server ends the stream
(shutdown); its response is then the last event. Here: the SSE framing, a keepalive comment
every ``keepalive_seconds`` (proxies close idle streams), and the client's disconnect
(``http.disconnect``), which cancels the handler. A refusal before the ack (bad filter, too
many streams) is a plain JSON answer with its HTTP status, as for any stateless request.
No event ids: the era has no resumption, a client that loses the stream listens again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from appdeck.observability import mcp as metrics
from appdeck.protocol.ports import RequestChannel
from appdeck.protocol.server import Answer
from appdeck.transport.responses import Receive, Send, send_empty, send_json
from appdeck.transport.sse import KEEPALIVE
from appdeck.transport.stateless_stream import StatelessStream, frame

JsonObject = dict[str, Any]


class ListenStream(StatelessStream):
    """The core's RequestChannel for one listen request, and the loop that serves it: a
    stateless stream that stays open, written by the handler and the keepalive in turn."""

    __slots__ = ("_keepalive", "_lock", "_receive")
    KIND = "listen"

    def __init__(self, receive: Receive, send: Send, keepalive_seconds: float) -> None:
        super().__init__(send)
        self._receive = receive
        self._keepalive = keepalive_seconds
        self._lock = asyncio.Lock()  # the handler and the keepalive write in turn

    async def send(self, message: JsonObject) -> None:
        async with self._lock:
            await super().send(message)

    async def close_stream(self) -> None:
        """Nothing to do: the stream stays open until the server or the client ends it."""

    async def run(self, answer: Callable[[RequestChannel], Awaitable[Answer]]) -> None:
        """Serve the request (``answer`` is the core's ``handle_request`` bound to a call on
        this channel) until it returns or the client goes away."""
        handler = asyncio.ensure_future(answer(self))
        gone = asyncio.ensure_future(self._disconnected())
        keeper = asyncio.ensure_future(self._keep_alive())
        try:
            await asyncio.wait({handler, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not handler.done():  # the client closed the stream: nothing more to send
                return
            response, status, extra = handler.result()
            if self.started:
                async with self._lock:
                    if response is not None:
                        await self._write(frame(response))
                    await self._write(b"", more=False)
            elif response is None:
                await send_empty(self._send, 202)
            else:
                await send_json(self._send, status, response, extra)
        finally:
            for task in (handler, gone, keeper):
                task.cancel()
            for task in (handler, gone, keeper):
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
            if self.started:
                metrics.stream_closed(self.KIND)

    async def _disconnected(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self._keepalive)
            if self.started:
                async with self._lock:
                    await self._write(KEEPALIVE)
