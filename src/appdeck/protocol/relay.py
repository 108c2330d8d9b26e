"""Messages from one replica to the others that must arrive: published on the broadcast,
acknowledged by the receiver on ``ack:<sender>``, published again (a few times over a few
seconds) until acknowledged. Pub/sub may lose a message while a connection is down; receivers
make acting twice harmless. Used by :class:`~appdeck.protocol.server.McpServer` for a
client's answers and cancels that reach the wrong replica.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable
from typing import Any

from appdeck.protocol.ports import Broadcast, Subscription

log = logging.getLogger("appdeck.protocol")
JsonObject = dict[str, Any]

ACK_CHANNEL = "ack:"
RELAY_WAITS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
"""Seconds to wait for an ack after each publish of a forwarded message (about 16 s in all:
past a broadcast reconnect's backoff, and past a starved receiver on a loaded machine: two
suites side by side lost a cancel with the 4 s this was)."""
MAX_RELAYED = 256
"""Forwards (and acks) in flight at once; past it a message is dropped and logged."""
MAX_RELAY_BYTES = 1024 * 1024


class Relay:
    """Messages to other replicas, acknowledged, published again until acknowledged."""

    def __init__(self, broadcast: Broadcast, instance_id: str) -> None:
        self._broadcast = broadcast
        self.me = instance_id
        self._acks: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._subscriptions: list[Subscription] = []
        self.dropped = 0
        """Messages neither sent nor acknowledged (too many in flight, too large, no ack)."""

    async def listen(self, channel: str, handler: Callable[[bytes], None]) -> None:
        self._subscriptions.append(await self._broadcast.subscribe(channel, handler))

    async def start(self) -> None:
        await self.listen(ACK_CHANNEL + self.me, self._on_ack)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for subscription in self._subscriptions:
            await self._broadcast.unsubscribe(subscription)
        self._subscriptions.clear()

    def send(self, channel: str, body: JsonObject) -> None:
        """Forward ``body`` on ``channel`` in the background, until acknowledged."""
        nonce = secrets.token_hex(8)
        try:
            payload = json.dumps({**body, "from": self.me, "nonce": nonce}).encode()
        except (TypeError, ValueError):
            payload = b""
        if not payload or len(payload) > MAX_RELAY_BYTES:
            self.dropped += 1
            log.warning("not forwarded to %s: not JSON or over %d bytes", channel, MAX_RELAY_BYTES)
            return
        self._spawn(self._send(channel, payload, nonce))

    def ack(self, body: JsonObject) -> None:
        """Acknowledge a message received from another replica."""
        sender, nonce = body.get("from"), body.get("nonce")
        if isinstance(sender, str) and isinstance(nonce, str) and 0 < len(sender) <= 64:
            payload = json.dumps({"nonce": nonce[:64]}).encode()
            self._spawn(self._publish(ACK_CHANNEL + sender, payload))

    def _spawn(self, work: Any) -> None:
        if len(self._tasks) >= MAX_RELAYED:
            work.close()
            self.dropped += 1
            log.warning("too many messages between replicas in flight; one dropped")
            return
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, channel: str, payload: bytes) -> None:
        try:
            await self._broadcast.publish(channel, payload)
        except Exception:
            log.warning("publish to %s failed", channel, exc_info=True)

    async def _send(self, channel: str, payload: bytes, nonce: str) -> None:
        acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks[nonce] = acked
        try:
            for wait in RELAY_WAITS:
                await self._publish(channel, payload)
                try:
                    async with asyncio.timeout(wait):
                        await asyncio.shield(acked)
                    return
                except TimeoutError:
                    continue
            self.dropped += 1
            log.info("no replica acknowledged a message on %s", channel)
        finally:
            self._acks.pop(nonce, None)

    def _on_ack(self, payload: bytes) -> None:
        body = decode(payload)
        nonce = body.get("nonce") if body is not None else None
        acked = self._acks.get(nonce) if isinstance(nonce, str) else None
        if acked is not None and not acked.done():
            acked.set_result(None)


def decode(payload: bytes) -> JsonObject | None:
    """A JSON object from another replica, or None (and logged) when it is not one."""
    if len(payload) > MAX_RELAY_BYTES:
        log.warning("dropped a message of %d bytes from another replica", len(payload))
        return None
    try:
        body = json.loads(payload)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        log.warning("dropped a malformed message from another replica")
        return None
    return body
