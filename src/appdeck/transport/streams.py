"""The SSE response stream of one POST request (the core's RequestChannel).

A request is answered as plain JSON unless its handler sends something first (a log line,
progress, a request to the client); then the response turns into an SSE stream on the spot.
Every event also goes through the hub into the event log, so a client that loses the stream
(or that we close on purpose, SEP-1699 polling) resumes it with GET + ``Last-Event-ID``.
"""

from __future__ import annotations

import secrets
from typing import Any

from appdeck.protocol.call import Call
from appdeck.transport.hub import StreamHub
from appdeck.transport.responses import Send
from appdeck.transport.sse import SSE_HEADERS, encode_event, event_id, priming

JsonObject = dict[str, Any]


class PostStream:
    __slots__ = ("_call", "_hub", "_priming", "_retry_ms", "_send", "closed", "started", "stream")

    def __init__(
        self, send: Send, hub: StreamHub, call: Call, *, retry_ms: int, resumable: bool
    ) -> None:
        self._send = send
        self._hub = hub
        self._call = call
        self._retry_ms = retry_ms
        self._priming = resumable
        self.started = False
        self.closed = False
        self.stream = ""

    def _session_id(self) -> str:
        session = self._call.session
        assert session is not None, "a request stream needs a session"
        return session.id

    async def _start(self) -> None:
        sid = self._session_id()
        self.started = True
        self.stream = secrets.token_hex(6)
        await self._hub.open_request_stream(sid, self.stream, resumable=self._priming)
        headers = [*SSE_HEADERS, (b"mcp-session-id", sid.encode())]
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        if self._priming:
            await self._write(priming(event_id(self.stream, 0), self._retry_ms))

    async def _write(self, data: bytes, more: bool = True) -> None:
        if self.closed:
            return
        try:
            await self._send({"type": "http.response.body", "body": data, "more_body": more})
        except OSError:  # the client went away; the log keeps the events for resumption
            self.closed = True
        if not more:
            self.closed = True

    async def send(self, message: JsonObject) -> None:
        if not self.started:
            await self._start()
        event = await self._hub.publish(self._session_id(), self.stream, message)
        await self._write(encode_event(event_id(self.stream, event.seq), event.payload))

    async def close_stream(self) -> None:
        """End the HTTP response but not the stream: the client polls it back with GET."""
        if not self._priming:
            return  # without event ids the client could not resume; keep the stream open
        if not self.started:
            await self._start()
        await self._write(b"", more=False)

    async def finish(self, response: JsonObject | None) -> None:
        """Send the final response (if any) and end the stream."""
        sid = self._session_id()
        try:
            if response is not None:
                event = await self._hub.publish(sid, self.stream, response)
                await self._write(encode_event(event_id(self.stream, event.seq), event.payload))
            await self._write(b"", more=False)
        finally:
            self._hub.close_request_stream(sid, self.stream)
