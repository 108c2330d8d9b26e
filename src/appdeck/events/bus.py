"""The live bus: delivers stream events to the connections listening for a session.

In-process by default. A Redis implementation of the same two methods lets several replicas
serve one fleet of sessions.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Protocol

from appdeck.events.ports import StoredEvent

CLOSE = object()
"""Sent to a session's listeners when the session ends."""


@dataclass(frozen=True, slots=True)
class Delivery:
    event: StoredEvent
    message: dict[str, Any]


class Listener:
    """One connection's inbox for one session: bounded, so a stuck client cannot grow it."""

    __slots__ = ("_queue", "overflowed", "session_id")

    def __init__(self, session_id: str, maxsize: int = 10_000) -> None:
        self.session_id = session_id
        self._queue: asyncio.Queue[Delivery | object] = asyncio.Queue(maxsize)
        self.overflowed = False

    def put(self, item: Delivery | object) -> None:
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.overflowed = True  # the reader closes; the client resumes from the log

    async def get(self, wait: float) -> Delivery | object | None:
        try:
            async with asyncio.timeout(wait):
                return await self._queue.get()
        except TimeoutError:
            return None


class Bus(Protocol):
    def subscribe(self, session_id: str) -> Listener: ...
    def unsubscribe(self, listener: Listener) -> None: ...
    async def publish(self, session_id: str, item: Delivery | object) -> None: ...


class InProcessBus:
    """Fan-out to listeners in this process."""

    def __init__(self) -> None:
        self._listeners: dict[str, set[Listener]] = defaultdict(set)

    def subscribe(self, session_id: str) -> Listener:
        listener = Listener(session_id)
        self._listeners[session_id].add(listener)
        return listener

    def unsubscribe(self, listener: Listener) -> None:
        group = self._listeners.get(listener.session_id)
        if group is not None:
            group.discard(listener)
            if not group:
                del self._listeners[listener.session_id]

    async def publish(self, session_id: str, item: Delivery | object) -> None:
        for listener in tuple(self._listeners.get(session_id, ())):
            listener.put(item)
