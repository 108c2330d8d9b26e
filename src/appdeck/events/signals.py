"""Messages between replicas: the :class:`~appdeck.protocol.ports.Broadcast` port.

:class:`LocalBroadcast` is the embedded default (one process: a synchronous in-memory fan-out).
:class:`RedisBroadcast` carries the same calls over Redis pub/sub, through one connection per
process whatever the number of channels. Pub/sub is at most once: a message published while a
replica's connection is down is lost for it, so every user keeps a backstop read and
registers :meth:`on_reconnect` to re-read the truth when the connection comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from appdeck.common.outages import redis_errors

if TYPE_CHECKING:  # loaded by replica mode only (appdeck.common.outages)
    from redis.asyncio import Redis
    from redis.asyncio.client import PubSub

log = logging.getLogger("appdeck.events")

Handler = Callable[[bytes], None]
MAX_PAYLOAD: Final = 1024 * 1024
"""A message larger than this is refused on publish (pub/sub is for doorbells and ids)."""
BACKOFF: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


class _Subscription:
    __slots__ = ("_channel", "handler")

    def __init__(self, channel: str, handler: Handler) -> None:
        self._channel = channel
        self.handler = handler

    @property
    def channel(self) -> str:
        return self._channel


def _call(handler: Handler, payload: bytes, channel: str) -> None:
    try:
        handler(payload)
    except Exception:  # a handler must not raise; one that does must not stop the others
        log.exception("broadcast handler failed", extra={"channel": channel})


class _Fanout:
    """Channel → handlers, shared by both implementations."""

    def __init__(self) -> None:
        self._handlers: dict[str, set[_Subscription]] = defaultdict(set)
        self._reconnected: list[Callable[[], None]] = []

    def add(self, channel: str, handler: Handler) -> tuple[_Subscription, bool]:
        """The new subscription, and whether it is the channel's first."""
        subscription = _Subscription(channel, handler)
        group = self._handlers[channel]
        group.add(subscription)
        return subscription, len(group) == 1

    def remove(self, subscription: object) -> str | None:
        """Forget a subscription; the channel's name when it was its last."""
        if not isinstance(subscription, _Subscription):
            return None
        group = self._handlers.get(subscription.channel)
        if group is None or subscription not in group:
            return None
        group.discard(subscription)
        if group:
            return None
        del self._handlers[subscription.channel]
        return subscription.channel

    def deliver(self, channel: str, payload: bytes) -> None:
        for subscription in tuple(self._handlers.get(channel, ())):
            _call(subscription.handler, payload, channel)

    def channels(self) -> list[str]:
        return list(self._handlers)

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self._reconnected.append(callback)

    def reconnected(self) -> None:
        for callback in tuple(self._reconnected):
            try:
                callback()
            except Exception:
                log.exception("reconnect callback failed")


class LocalBroadcast:
    """One process: ``publish`` calls this process's handlers before it returns."""

    def __init__(self) -> None:
        self._fanout = _Fanout()

    async def publish(self, channel: str, payload: bytes) -> None:
        self._fanout.deliver(channel, payload)

    async def subscribe(self, channel: str, handler: Handler) -> _Subscription:
        subscription, _ = self._fanout.add(channel, handler)
        return subscription

    async def unsubscribe(self, subscription: object) -> None:
        self._fanout.remove(subscription)

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self._fanout.on_reconnect(callback)  # never called: nothing to lose in one process


class RedisBroadcast:
    """Redis pub/sub under ``<prefix>:b:<channel>``; one reader task per process.

    The reader keeps one :class:`PubSub` connection. When it drops, the reader reconnects with
    a capped backoff, subscribes again to every channel with a handler, then calls the
    ``on_reconnect`` callbacks (whatever was published meanwhile is lost for this process).
    """

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._prefix = f"{prefix}:b:"
        self._fanout = _Fanout()
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._mutex = asyncio.Lock()  # subscribe/unsubscribe vs the reader's resubscription

    def _wire(self, channel: str) -> str:
        return self._prefix + channel

    async def start(self) -> None:
        if self._reader is None:
            await self._connect()
            self._reader = asyncio.create_task(self._read(), name="appdeck-broadcast")

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        await self._drop_pubsub()

    async def publish(self, channel: str, payload: bytes) -> None:
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"broadcast payload of {len(payload)} bytes (limit {MAX_PAYLOAD})")
        await self._redis.publish(self._wire(channel), payload)

    async def subscribe(self, channel: str, handler: Handler) -> _Subscription:
        async with self._mutex:
            subscription, first = self._fanout.add(channel, handler)
            if first and self._pubsub is not None:
                try:
                    await self._pubsub.subscribe(self._wire(channel))
                except redis_errors():  # the reader reconnects and subscribes it again
                    log.warning("broadcast subscribe failed; retried on reconnect")
        return subscription

    async def unsubscribe(self, subscription: object) -> None:
        async with self._mutex:
            channel = self._fanout.remove(subscription)
            if channel is not None and self._pubsub is not None:
                with contextlib.suppress(*redis_errors()):
                    await self._pubsub.unsubscribe(self._wire(channel))

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self._fanout.on_reconnect(callback)

    # -- the reader -----------------------------------------------------------------------

    async def _connect(self) -> None:
        async with self._mutex:
            await self._drop_pubsub()
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            # a channel nobody uses keeps the connection subscribed (get_message needs one)
            await pubsub.subscribe(self._prefix + "_", *map(self._wire, self._fanout.channels()))
            self._pubsub = pubsub

    async def _drop_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _read(self) -> None:
        failures = 0
        while True:
            try:
                if self._pubsub is None:
                    await self._connect()
                    self._fanout.reconnected()
                    log.info("broadcast reconnected")
                failures = 0
                assert self._pubsub is not None
                message = await self._pubsub.get_message(timeout=1.0)
                if message is not None and message.get("type") == "message":
                    self._dispatch(message.get("channel"), message.get("data"))
            except asyncio.CancelledError:
                raise
            except redis_errors(OSError) as exc:
                delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                log.warning("broadcast connection lost (%s); retrying in %.2f s", exc, delay)
                await self._drop_pubsub()
                await asyncio.sleep(delay)

    def _dispatch(self, wire: object, data: object) -> None:
        if not isinstance(wire, bytes) or not isinstance(data, bytes):
            return
        name = wire.decode("utf-8", "replace")
        if name.startswith(self._prefix):
            self._fanout.deliver(name[len(self._prefix) :], data)
