"""A stateless (MCP 2026-07-28) request's response stream.

The answer is plain JSON unless the handler sends something first (progress, a log line);
then the response becomes an SSE stream on the spot, carrying those notifications and, last,
the response. The era has no resumption: no event ids, no event log, no GET to come back to.
A client that loses the stream sends the request again.
"""

from __future__ import annotations

from typing import Any

import orjson

from appdeck.observability import mcp as metrics
from appdeck.transport.responses import Send
from appdeck.transport.sse import SSE_HEADERS

JsonObject = dict[str, Any]


def frame(message: JsonObject) -> bytes:
    """One SSE event carrying ``message``: no id (the stateless era has no resumption)."""
    return b"event: message\ndata: " + orjson.dumps(message) + b"\n\n"


class StatelessStream:
    """The core's RequestChannel for one stateless request."""

    __slots__ = ("_send", "closed", "started")
    KIND = "post"
    """Its label in ``appdeck_mcp_streams_open``; whoever ends the stream counts it closed."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.closed = False

    async def _write(self, data: bytes, more: bool = True) -> None:
        if self.closed:
            return
        try:
            await self._send({"type": "http.response.body", "body": data, "more_body": more})
        except OSError:  # the client went away: what it missed is lost, as the era says
            self.closed = True
        if not more:
            self.closed = True

    async def send(self, message: JsonObject) -> None:
        if not self.started:
            self.started = True
            metrics.stream_opened(self.KIND)
            await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await self._write(frame(message))

    async def close_stream(self) -> None:
        """Nothing to do: a stateless stream cannot be resumed, so it stays open."""

    async def finish(self, response: JsonObject | None) -> None:
        if response is not None:
            await self._write(frame(response))
        await self._write(b"", more=False)
