"""Where every SSE message goes: into the event log (for replay), then onto the bus (live).

The hub is the protocol core's :class:`~appdeck.protocol.ports.Outbox`: messages that belong
to no request go to the session's standalone stream. Request streams publish here too, so a
client that lost its POST stream can resume it with GET + ``Last-Event-ID`` (on any replica).

Per session, events reach the bus in ``seq`` order: appending and publishing are one step per
session (a striped lock), so two messages for one session never overtake each other between
the log's commit and the bus, whatever the database does with concurrent transactions. With
the Redis log (several replicas) the log's append script numbers the event and rings its
doorbell in one step, so the order holds across processes too, and a reader that sees a gap
in the (dense) seqs reads the missing events back from the log.

The hub also hands out stream leases: one standalone GET stream per session and one
connection per resumed request stream, cluster-wide when the leases live in Redis. A new GET
waits for a held lease to be released or to expire (409 meanwhile); a resumption takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

import orjson

from appdeck.events.bus import CLOSE, Bus, Delivery, Listener, Taken
from appdeck.events.leases import LocalLeases
from appdeck.events.ports import EventLog, Lease, StoredEvent, StreamLeases
from appdeck.transport.sse import GET_STREAM

log = logging.getLogger("appdeck.transport")
JsonObject = dict[str, Any]
STRIPES: Final = 256
"""Locks that order each session's appends (a session always maps to the same one)."""
MAX_OPEN_REQUESTS: Final = 100_000
"""Request streams this process remembers as open (each is a running POST)."""


class StreamHub:
    def __init__(self, log: EventLog, bus: Bus, leases: StreamLeases | None = None) -> None:
        self._log = log
        self._bus = bus
        self._leases = leases if leases is not None else LocalLeases()
        self._standalone: dict[str, int] = {}
        """Standalone streams open on this process, per session (what tests wait on)."""
        self._open_requests: set[tuple[str, str]] = set()
        self.leases_held = 0
        """Stream leases claimed here and not released yet (for metrics)."""
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
                await self._bus.publish(event.session_id, Delivery(event, message))

    async def close_session(self, session_id: str) -> None:
        """Close the session's streams on every replica, then forget its events."""
        await self._bus.publish(session_id, CLOSE)
        await self._log.drop_session(session_id)

    # -- connections ----------------------------------------------------------------------

    async def listen(self, session_id: str) -> Listener:
        return await self._bus.subscribe(session_id)

    async def unlisten(self, listener: Listener) -> None:
        await self._bus.unsubscribe(listener)

    async def tail(self, session_id: str, stream: str) -> int:
        """Where a new stream's history starts: the stream's newest seq (0 if none yet)."""
        return await self._log.tail(session_id, stream) or 0

    async def claim(self, session_id: str, stream: str, *, take_over: bool = False) -> Lease | None:
        """The lease on one stream of a session (the standalone one: ``GET_STREAM``), or None
        while another connection, on any replica, serves it. ``take_over`` (a client resuming
        after ``Last-Event-ID``): take it from a holder that may be dead, and tell the holder
        (:class:`~appdeck.events.bus.Taken`), which closes once its lease is not its own."""
        key = f"{session_id}:{stream}"
        if take_over:
            lease = await self._leases.take(key)
            if lease is not None:
                await self._bus.publish(session_id, Taken(stream))
        else:
            lease = await self._leases.acquire(key)
        if lease is not None:
            self.leases_held += 1
            if stream == GET_STREAM:
                self._standalone[session_id] = self._standalone.get(session_id, 0) + 1
        return lease

    async def release(self, session_id: str, stream: str, lease: Lease) -> None:
        self.leases_held -= 1
        if stream == GET_STREAM:
            left = self._standalone.get(session_id, 0) - 1
            if left > 0:
                self._standalone[session_id] = left
            else:
                self._standalone.pop(session_id, None)
        try:
            await self._leases.release(lease)
        except Exception:  # it expires on its own
            log.warning("stream lease release failed", exc_info=True)

    async def still_held(self, lease: Lease) -> bool:
        """Whether ``lease`` is still ours (renewing it if so)."""
        return await self._leases.renew(lease)

    async def keep(self, lease: Lease, lost: Callable[[], None]) -> None:
        """Renew ``lease`` until cancelled; call ``lost`` (and return) once it is not ours.

        A renewal that fails (Redis unreachable) is retried at the next tick: the lease is
        only lost when Redis says another holder has it or it is gone.
        """
        every = self._leases.renew_every
        if math.isinf(every):
            return
        while True:
            await asyncio.sleep(every)
            try:
                still = await self._leases.renew(lease)
            except Exception:
                log.warning("stream lease renewal failed; retrying", exc_info=True)
                continue
            if not still:
                lost()
                return

    async def open_request_stream(self, session_id: str, stream: str, resumable: bool) -> None:
        """A POST turned into a stream. ``resumable`` (its priming event was sent): make it
        known to the log so a GET on any replica can resume it before its first event."""
        if len(self._open_requests) < MAX_OPEN_REQUESTS:
            self._open_requests.add((session_id, stream))
        if resumable:
            await self._log.open_stream(session_id, stream)

    def close_request_stream(self, session_id: str, stream: str) -> None:
        self._open_requests.discard((session_id, stream))

    async def known_stream(self, session_id: str, stream: str) -> bool:
        """Whether a request stream of that session exists (open here, or in the log)."""
        if (session_id, stream) in self._open_requests:
            return True
        return await self._log.tail(session_id, stream) is not None
