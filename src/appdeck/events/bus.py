"""The live bus: delivers stream events to the connections listening for a session.

:class:`InProcessBus` is the embedded default: the hub hands each event to this process's
listeners directly. :class:`RedisBus` serves several replicas: the Redis event log's append
script publishes a *doorbell* for each event on the session's channel (``ev:<session>``) and
every replica with a listener for that session subscribes to it through the
:class:`~appdeck.protocol.ports.Broadcast`. Pub/sub is at most once, so doorbells are hints:
a reader delivers an event only when its seq is the next one (``last + 1``) and otherwise
reads the log from ``last`` (also on :data:`RESYNC`, sent after a reconnect, and on every
keepalive).

Doorbells (bytes): ``e<stream>.<seq>\\n<payload>`` an event, ``n<stream>.<seq>`` an event
too large to ring with (read it from the log), ``c`` the session has ended, ``t<stream>``
the stream's lease was taken by a resuming client (:class:`Taken`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import orjson

from appdeck.events.ports import StoredEvent
from appdeck.protocol.ports import Broadcast, Subscription

log = logging.getLogger("appdeck.events")

CLOSE: Final = object()
"""Sent to a session's listeners when the session ends."""
RESYNC: Final = object()
"""Sent to listeners when events may have been missed: read the log from the last seq."""
DOORBELL_EVENT: Final = b"e"
DOORBELL_NUDGE: Final = b"n"
DOORBELL_CLOSE: Final = b"c"
DOORBELL_TAKEN: Final = b"t"
MAX_STREAM_NAME: Final = 64


def channel(session_id: str) -> str:
    """The broadcast channel of a session's doorbells."""
    return f"ev:{session_id}"


@dataclass(frozen=True, slots=True)
class Taken:
    """A client resumed ``stream`` elsewhere and took its lease: its holder checks its own."""

    stream: str


@dataclass(frozen=True, slots=True)
class Delivery:
    event: StoredEvent
    message: dict[str, Any] | None
    """The decoded payload (None when it is not a JSON object)."""


Sink = Callable[[Delivery], bool]
"""Writes one live event out at once; False to have it queued for the reader instead."""


class Listener:
    """One connection's inbox for one session: bounded, so a stuck client cannot grow it.

    A reader may give it a *sink* (:meth:`write_through`): while the reader waits in
    :meth:`get` with nothing queued, each :class:`Delivery` goes to the sink first, which
    writes it out in the publisher's pass, without waking the reader (a fan-out to 1,000
    streams is one pass, not 1,000 task switches). Anything the sink declines, and anything
    that is not a Delivery, is queued; once something is queued, everything after it is too,
    until the reader has taken the queue and waits on an empty one again, so the reader sees
    the items in the order they came.
    """

    __slots__ = ("_idle", "_queue", "_sink", "overflowed", "session_id")

    def __init__(self, session_id: str, maxsize: int = 10_000) -> None:
        self.session_id = session_id
        self._queue: asyncio.Queue[Delivery | object] = asyncio.Queue(maxsize)
        self.overflowed = False
        self._sink: Sink | None = None
        self._idle = False  # the reader waits in get() and nothing is queued

    def write_through(self, sink: Sink | None) -> None:
        """Offer live deliveries to ``sink`` while the reader is idle (None: stop)."""
        self._sink = sink

    def put(self, item: Delivery | object) -> None:
        sink = self._sink
        if self._idle and sink is not None and type(item) is Delivery and sink(item):
            return
        self._idle = False
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.overflowed = True  # the reader closes; the client resumes from the log

    async def get(self, wait: float) -> Delivery | object | None:
        queue = self._queue
        if not queue.empty():
            return queue.get_nowait()
        self._idle = True
        try:
            async with asyncio.timeout(wait):
                return await queue.get()
        except TimeoutError:
            return None
        finally:
            self._idle = False


class Bus(Protocol):
    async def subscribe(self, session_id: str) -> Listener: ...
    async def unsubscribe(self, listener: Listener) -> None: ...
    async def publish(self, session_id: str, item: Delivery | object) -> None: ...


class InProcessBus:
    """Fan-out to listeners in this process."""

    def __init__(self) -> None:
        self._listeners: dict[str, set[Listener]] = defaultdict(set)

    async def subscribe(self, session_id: str) -> Listener:
        listener = Listener(session_id)
        self._listeners[session_id].add(listener)
        return listener

    async def unsubscribe(self, listener: Listener) -> None:
        group = self._listeners.get(listener.session_id)
        if group is not None:
            group.discard(listener)
            if not group:
                del self._listeners[listener.session_id]

    async def publish(self, session_id: str, item: Delivery | object) -> None:
        for listener in tuple(self._listeners.get(session_id, ())):
            listener.put(item)


def decode_doorbell(session_id: str, data: bytes) -> Delivery | object | None:
    """A doorbell as a listener item (:class:`Delivery`, :data:`RESYNC`, :data:`CLOSE`,
    :class:`Taken`); None for a malformed one (dropped)."""
    kind, body = data[:1], data[1:]
    if kind == DOORBELL_CLOSE:
        return CLOSE
    if kind == DOORBELL_NUDGE:
        return RESYNC
    if kind == DOORBELL_TAKEN:
        if not body or len(body) > MAX_STREAM_NAME or not body.isascii():
            return None
        return Taken(body.decode("ascii"))
    if kind != DOORBELL_EVENT:
        return None
    head, newline, payload = body.partition(b"\n")
    stream, dot, seq = head.rpartition(b".")
    if not newline or not dot or not stream or len(stream) > MAX_STREAM_NAME:
        return None
    if not seq.isdigit() or len(seq) > 18:
        return None
    if b"\n" in payload or b"\r" in payload:  # would break the SSE framing
        return None
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return RESYNC  # the log has it; a reader decodes it there (or drops it)
    event = StoredEvent(session_id, stream.decode("ascii", "replace"), int(seq), payload)
    return Delivery(event, message if isinstance(message, dict) else None)


@dataclass(slots=True)
class _Group:
    listeners: set[Listener] = field(default_factory=set)
    subscription: Subscription | None = None


class RedisBus:
    """Listeners of this process, fed by the doorbells the Redis event log publishes.

    A session's channel is subscribed while this process has a listener for it. ``publish``
    of a :class:`Delivery` does nothing: the log's append script already rang the doorbell
    (in the same step as the append, so doorbells go out in seq order). ``publish`` of
    :data:`CLOSE` or :class:`Taken` rings it on every replica.
    """

    def __init__(self, broadcast: Broadcast, *, queue_size: int = 10_000) -> None:
        self._broadcast = broadcast
        self._queue_size = queue_size
        self._groups: dict[str, _Group] = {}  # bounded by the sessions with an open stream
        self._mutex = asyncio.Lock()  # a channel is subscribed before its first reader reads
        broadcast.on_reconnect(self._resync_all)

    def _resync_all(self) -> None:
        for group in self._groups.values():
            for listener in tuple(group.listeners):
                listener.put(RESYNC)

    def _ring(self, session_id: str, data: bytes) -> None:
        item = decode_doorbell(session_id, data)
        if item is None:
            log.warning("malformed doorbell dropped", extra={"session_id": session_id})
            return
        group = self._groups.get(session_id)
        if group is not None:
            for listener in tuple(group.listeners):
                listener.put(item)

    async def subscribe(self, session_id: str) -> Listener:
        listener = Listener(session_id, self._queue_size)
        async with self._mutex:
            group = self._groups.get(session_id)
            if group is None:
                group = self._groups[session_id] = _Group()
                try:
                    group.subscription = await self._broadcast.subscribe(
                        channel(session_id), lambda data: self._ring(session_id, data)
                    )
                except BaseException:
                    del self._groups[session_id]
                    raise
            group.listeners.add(listener)
        return listener

    async def unsubscribe(self, listener: Listener) -> None:
        async with self._mutex:
            group = self._groups.get(listener.session_id)
            if group is None:
                return
            group.listeners.discard(listener)
            if group.listeners:
                return
            del self._groups[listener.session_id]
            if group.subscription is not None:
                await self._broadcast.unsubscribe(group.subscription)

    async def publish(self, session_id: str, item: Delivery | object) -> None:
        if item is CLOSE:
            await self._broadcast.publish(channel(session_id), DOORBELL_CLOSE)
        elif isinstance(item, Taken):
            await self._broadcast.publish(
                channel(session_id), DOORBELL_TAKEN + item.stream.encode("ascii", "replace")
            )
