"""SSE response streams: a POST's (:class:`PostStream`, the core's RequestChannel) and a
GET's (:class:`GetStream`: the standalone stream, or a stream resumed after Last-Event-ID).

A request is answered as plain JSON unless its handler sends something first (a log line,
progress, a request to the client); then the response turns into an SSE stream on the spot.
Every event also goes through the hub into the event log, so a client that loses the stream
(or that we close on purpose, SEP-1699 polling) resumes it with GET + ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any, Final

import orjson

from appdeck.common.outages import redis_errors
from appdeck.events.bus import CLOSE, RESYNC, Delivery, Listener, Taken
from appdeck.events.ports import Lease
from appdeck.observability import mcp as metrics
from appdeck.protocol import errors as rpc
from appdeck.protocol import versions
from appdeck.protocol.call import Call
from appdeck.protocol.sessions import Session
from appdeck.transport.eager import Rest, start_eagerly
from appdeck.transport.guard import HttpError
from appdeck.transport.hub import StreamHub
from appdeck.transport.responses import Receive, Send
from appdeck.transport.sse import (
    GET_STREAM,
    KEEPALIVE,
    SSE_HEADERS,
    encode_event,
    event_id,
    priming,
)

log = logging.getLogger("appdeck.transport")
JsonObject = dict[str, Any]
RETRY_SOON: Final = [(b"retry-after", b"1")]


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
        metrics.stream_opened("post")  # mcp_http counts it closed once the request is answered
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


class GetStream:
    """One GET stream: history after ``Last-Event-ID`` from the log, then live events.

    Live events come from the bus. While the reader waits, the publisher writes them through
    (:meth:`Listener.write_through`: the next event of this stream, in the publisher's pass);
    the reader writes the rest in order. With a dense log (Redis, several replicas) a doorbell is a
    hint: an event is sent only when its seq is ``last + 1``; a gap, a :data:`RESYNC` and
    every keepalive read the log from ``last`` instead, so a lost doorbell costs latency,
    never an event. Ends on the session's CLOSE (from any replica, or the log's tombstone
    seen at a keepalive), a lost lease (taken by a resumption, seen from its ``Taken``
    doorbell or at a renewal), a response on a request stream, or a disconnect.
    """

    PAGE: Final = 500

    def __init__(
        self,
        receive: Receive,
        send: Send,
        hub: StreamHub,
        session: Session,
        stream: str,
        lease: Lease,
    ) -> None:
        self._hub = hub
        self._receive = receive
        self._send = send
        self._session = session
        self._stream = stream
        self._lease = lease
        self._last = 0
        self._dense = hub.log.dense
        self._rests: Listener | None = None
        """Where a write the publisher started and could not finish goes (the listener)."""

    async def _chunk(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def _event(self, seq: int, payload: bytes, message: Any) -> bool:
        """Send one event; True when it ended the stream (a request stream's response)."""
        await self._chunk(encode_event(event_id(self._stream, seq), payload))
        self._last = seq
        return self._stream != GET_STREAM and _is_response(message)

    def _write_now(self, item: Delivery) -> bool:
        """The listener's sink (the reader is idle): write the stream's next event at once.
        False leaves it to the reader: a gap in a dense log (read back), a response (it ends
        a request stream), a send that failed (the reader's own send meets the error)."""
        event = item.event
        if event.stream != self._stream or event.seq <= self._last:
            return True  # the reader would skip it too
        if self._dense and event.seq != self._last + 1:
            return False
        if self._stream != GET_STREAM and _is_response(item.message):
            return False
        chunk = encode_event(event_id(self._stream, event.seq), event.payload)
        try:
            rest = start_eagerly(
                self._send({"type": "http.response.body", "body": chunk, "more_body": True})
            )
        except Exception:  # noqa: BLE001 - the reader's own send meets it again, in its task
            return False
        self._last = event.seq
        if rest is not None and self._rests is not None:  # the transport paused: the reader
            self._rests.put(rest)  # finishes the write before any other
        return True

    async def _catch_up(self) -> bool:
        """Send what the log has after ``last``; True when that ended the stream."""
        log_ = self._hub.log
        while True:
            events = await log_.replay(self._session.id, self._stream, self._last, self.PAGE)
            for event in events:
                if event.seq <= self._last:
                    continue
                metrics.replayed(1)
                if await self._event(event.seq, event.payload, _loads(event.payload)):
                    return True
            if len(events) < self.PAGE:
                return False

    async def run(self, after: int | None, keepalive_seconds: float, retry_ms: int) -> None:
        hub = self._hub
        sid = self._session.id
        listener = await hub.listen(sid)
        fresh = after is None
        try:  # after listening: whatever comes later reaches the listener
            if after is None:
                after = await hub.tail(sid, self._stream)
            elif hub.log.dense:  # an id past the tail (forged, or older than the counter)
                after = min(after, await hub.tail(sid, self._stream))
        except redis_errors():
            await hub.unlisten(listener)
            log.warning("stream state unreachable", exc_info=True)
            raise HttpError(
                503, rpc.SERVER_ERROR, "Service Unavailable: try again", RETRY_SOON
            ) from None
        self._last = after
        gone = asyncio.Event()

        async def watch_disconnect() -> None:
            while (await self._receive())["type"] != "http.disconnect":
                pass
            gone.set()
            listener.put(CLOSE)

        watcher = asyncio.create_task(watch_disconnect())
        keeper = asyncio.create_task(hub.keep(self._lease, lambda: listener.put(CLOSE)))
        metrics.stream_opened("get")
        try:
            out = [*SSE_HEADERS, (b"mcp-session-id", sid.encode())]
            await self._send({"type": "http.response.start", "status": 200, "headers": out})
            if fresh and versions.has_priming_event(self._session.protocol_version):
                await self._chunk(priming(event_id(self._stream, after), retry_ms))
            if not fresh and await self._catch_up():
                return
            await self._live(listener, gone, keepalive_seconds)
        except OSError:
            return
        except redis_errors():  # the client resumes after Last-Event-ID, maybe elsewhere
            log.warning("stream state unreachable; stream closed", exc_info=True)
            return
        finally:
            for task in (watcher, keeper):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await hub.unlisten(listener)
            metrics.stream_closed("get")
            with contextlib.suppress(OSError):
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _live(self, listener: Listener, gone: asyncio.Event, keepalive: float) -> None:
        self._rests = listener
        listener.write_through(self._write_now)
        try:
            await self._read(listener, gone, keepalive)
        finally:
            listener.write_through(None)

    async def _read(self, listener: Listener, gone: asyncio.Event, keepalive: float) -> None:
        hub = self._hub
        log_ = hub.log
        dense = self._dense
        while not gone.is_set():
            item = await listener.get(keepalive)
            if item is None:
                await self._chunk(KEEPALIVE)
                # the backstop of an at-most-once bus
                if dense and (await log_.closed(self._session.id) or await self._catch_up()):
                    return
                continue
            if item is CLOSE or listener.overflowed:
                return
            if isinstance(item, Rest):  # a write the publisher started: it goes out first
                await item
                continue
            if item is RESYNC:
                if await self._catch_up():
                    return
                continue
            if isinstance(item, Taken):
                if item.stream == self._stream and not await hub.still_held(self._lease):
                    return  # a resumption elsewhere took the stream
                continue
            if not isinstance(item, Delivery):
                continue
            event = item.event
            if event.stream != self._stream or event.seq <= self._last:
                continue
            if dense and event.seq != self._last + 1:
                if await self._catch_up():
                    return
                continue
            if await self._event(event.seq, event.payload, item.message):
                return


def _loads(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None


def _is_response(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and "id" in message
        and ("result" in message or "error" in message)
    )
