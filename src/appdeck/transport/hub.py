"""Where every SSE message goes: into the event log (for replay), then onto the bus (live).

The hub is the protocol core's :class:`~appdeck.protocol.ports.Outbox`: messages that belong
to no request go to the session's standalone stream. Request streams publish here too, so a
client that lost its POST stream can resume it with GET + ``Last-Event-ID``.

Per session, events reach the bus in ``seq`` order: a reader drops anything at or below the
last seq it sent (a replayed event arriving live again), so an event published after a higher
one would be lost. Appending and publishing are one step per session (a striped lock): two
messages for one session never overtake each other between the log's commit and the bus,
whatever the database does with concurrent transactions. (Across processes this takes the
shared log of issue 13.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson

from appdeck.events.bus import CLOSE, Bus, Delivery, Listener
from appdeck.events.ports import EventLog, StoredEvent
from appdeck.transport.sse import GET_STREAM

JsonObject = dict[str, Any]
STRIPES = 256
"""Locks that order each session's appends (a session always maps to the same one)."""


class StreamHub:
    def __init__(self, log: EventLog, bus: Bus) -> None:
        self._log = log
        self._bus = bus
        self.high_water = 0
        """The highest seq this process has seen: where a new stream's history starts."""
        self._standalone: dict[str, int] = {}
        self._resumed: set[tuple[str, str]] = set()
        self._open_requests: set[tuple[str, str]] = set()
        self._stripes = [asyncio.Lock() for _ in range(STRIPES)]

    @contextlib.asynccontextmanager
    async def _in_order(self, session_ids: Sequence[str]) -> AsyncIterator[None]:
        """Hold the locks of these sessions (in one global order: no deadlock)."""
        held: list[asyncio.Lock] = []
        try:
            for stripe in sorted({hash(sid) % STRIPES for sid in session_ids}):
                lock = self._stripes[stripe]
                await lock.acquire()
                held.append(lock)
            yield
        finally:
            for lock in held:
                lock.release()

    @property
    def log(self) -> EventLog:
        return self._log

    async def publish(self, session_id: str, stream: str, message: JsonObject) -> StoredEvent:
        payload = orjson.dumps(message)
        async with self._in_order((session_id,)):
            event = await self._log.append(session_id, stream, payload)
            self.high_water = max(self.high_water, event.seq)
            await self._bus.publish(session_id, Delivery(event, message))
        return event

    # -- Outbox ---------------------------------------------------------------------------

    async def to_session(self, session_id: str, message: JsonObject) -> None:
        await self.publish(session_id, GET_STREAM, message)

    async def to_sessions(self, session_ids: Sequence[str], message: JsonObject) -> None:
        payload = orjson.dumps(message)
        async with self._in_order(session_ids):
            items = [(sid, GET_STREAM, payload) for sid in session_ids]
            events = await self._log.append_many(items)
            for event in events:
                self.high_water = max(self.high_water, event.seq)
                await self._bus.publish(event.session_id, Delivery(event, message))

    async def close_session(self, session_id: str) -> None:
        await self._bus.publish(session_id, CLOSE)
        await self._log.drop_session(session_id)

    # -- connections ----------------------------------------------------------------------

    def listen(self, session_id: str) -> Listener:
        return self._bus.subscribe(session_id)

    def unlisten(self, listener: Listener) -> None:
        self._bus.unsubscribe(listener)

    def claim_standalone(self, session_id: str, limit: int = 1) -> bool:
        """Reserve the session's standalone stream; False when ``limit`` are already open."""
        if self._standalone.get(session_id, 0) >= limit:
            return False
        self._standalone[session_id] = self._standalone.get(session_id, 0) + 1
        return True

    def release_standalone(self, session_id: str) -> None:
        left = self._standalone.get(session_id, 0) - 1
        if left > 0:
            self._standalone[session_id] = left
        else:
            self._standalone.pop(session_id, None)

    def open_request_stream(self, session_id: str, stream: str) -> None:
        self._open_requests.add((session_id, stream))

    def close_request_stream(self, session_id: str, stream: str) -> None:
        self._open_requests.discard((session_id, stream))

    def request_stream_open(self, session_id: str, stream: str) -> bool:
        return (session_id, stream) in self._open_requests

    def claim_resumed(self, session_id: str, stream: str) -> bool:
        key = (session_id, stream)
        if key in self._resumed:
            return False
        self._resumed.add(key)
        return True

    def release_resumed(self, session_id: str, stream: str) -> None:
        self._resumed.discard((session_id, stream))
