"""Live parts of the console: platform changes, on every replica, to the browsers watching.

The replica where a change happens publishes it on the broadcast's ``console`` channel (one
process: delivered in-process; replicas: through Redis, to every replica, itself included);
each replica hands it to its own streams of that tenant (and app). A stream carries only the
change's kind and app: the browser then fetches the part of the page that changed, through the
same role checks as any page, so a stream never carries what its viewer may not read.
Messages lost while the broadcast reconnects become a ``resync`` (refresh everything).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

import orjson

from appdeck.platform.changes import Change
from appdeck.protocol.ports import Broadcast, Subscription

log = logging.getLogger("appdeck.console")

CHANNEL: Final = "console"
MAX_STREAMS: Final = 2000
"""Streams one replica holds at most (a browser tab holds one)."""
PER_OWNER: Final = 16
"""Streams one console session holds at most on a replica (tabs of one browser): one user
cannot take every slot."""
QUEUE: Final = 64
"""Changes waiting for one slow stream at most: past it, the stream gets ``resync``."""
NOT_SHOWN: Final = frozenset({"commit.received"})
"""Kinds no page refreshes on, never sent: a received commit comes with ``app.updated``,
which already refreshes every part that shows a commit (the overview, the repository, the CI
runs, the health); sent too, it would make the overview (``data-on="*"``) fetch twice per
push, on every replica's streams of the tenant."""


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    app_id: int | None = None
    deployment: int | None = None

    def wire(self) -> bytes:
        body = {"kind": self.kind, "app": self.app_id, "deployment": self.deployment}
        return orjson.dumps(body)


RESYNC: Final = Event("resync")
END: Final = Event("end")
"""Not sent: tells a stream the server is stopping (its response ends; the browser reconnects
to whichever replica is still serving)."""


@dataclass(eq=False, slots=True)
class _Stream:
    tenant: str
    app_id: int | None
    """None: every app of the tenant (the overview)."""
    queue: asyncio.Queue[Event] = field(default_factory=lambda: asyncio.Queue(QUEUE))

    def offer(self, event: Event) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:  # a stalled reader: drop what waits, ask for a refresh
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(RESYNC)


class TooManyStreams(Exception):
    pass


class LiveChanges:
    def __init__(self, broadcast: Broadcast) -> None:
        self._broadcast = broadcast
        self._streams: set[_Stream] = set()
        self._owners: dict[str, int] = {}
        self._subscription: Subscription | None = None

    async def start(self) -> None:
        self._subscription = await self._broadcast.subscribe(CHANNEL, self._received)
        self._broadcast.on_reconnect(self._lost)

    async def close(self) -> None:
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._broadcast.unsubscribe(self._subscription)
            self._subscription = None

    @property
    def streams(self) -> int:
        return len(self._streams)

    async def publish(self, change: Change) -> None:
        """The change feed's listener: to every replica's streams (itself included)."""
        if change.kind in NOT_SHOWN:
            return
        payload = orjson.dumps(
            {
                "t": change.tenant_id,
                "k": change.kind,
                "a": change.app_id,
                "d": change.deployment,
            }
        )
        await self._broadcast.publish(CHANNEL, payload)

    def _received(self, payload: bytes) -> None:
        try:
            body = orjson.loads(payload)
            tenant, event = str(body["t"]), Event(str(body["k"]), int(body["a"]), body.get("d"))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("console change not understood")
            return
        for stream in list(self._streams):
            if stream.tenant == tenant and stream.app_id in (None, event.app_id):
                stream.offer(event)

    def _lost(self) -> None:
        for stream in list(self._streams):
            stream.offer(RESYNC)

    def end_all(self) -> None:
        """The server is stopping: every stream ends now rather than at its lifetime."""
        for stream in list(self._streams):
            while not stream.queue.empty():
                stream.queue.get_nowait()
            stream.queue.put_nowait(END)

    @contextlib.asynccontextmanager
    async def follow(
        self, tenant: str, app_id: int | None, *, owner: str | None = None
    ) -> AsyncIterator[asyncio.Queue[Event]]:
        """A queue of the changes to ``tenant``'s app ``app_id`` (None: all its apps).
        ``owner`` (a console session) holds at most :data:`PER_OWNER` streams at once."""
        if len(self._streams) >= MAX_STREAMS:
            raise TooManyStreams
        if owner is not None and self._owners.get(owner, 0) >= PER_OWNER:
            raise TooManyStreams
        stream = _Stream(tenant, app_id)
        self._streams.add(stream)
        if owner is not None:
            self._owners[owner] = self._owners.get(owner, 0) + 1
        try:
            yield stream.queue
        finally:
            self._streams.discard(stream)
            if owner is not None:
                left = self._owners.get(owner, 1) - 1
                if left > 0:
                    self._owners[owner] = left
                else:
                    self._owners.pop(owner, None)
