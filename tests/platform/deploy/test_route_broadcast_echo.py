"""A replica about to stop instances waits until its route changes came back to it through
the broadcast (which hands a message to every replica at once), not only until they were
sent (issue 20, item 3)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from appdeck.ingress import Counters, RouteTable
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.platform.deploy.ports import Backend

ONE = [Backend("1-1", 100, ("127.0.0.1:20001",))]


class HeldBroadcast:
    """A broadcast that keeps what is published until :meth:`deliver` (a slow Redis)."""

    def __init__(self) -> None:
        self.handlers: list[Callable[[bytes], None]] = []
        self.sent: list[bytes] = []

    async def publish(self, channel: str, payload: bytes) -> None:
        self.sent.append(payload)

    async def subscribe(self, channel: str, handler: Callable[[bytes], None]) -> Any:
        self.handlers.append(handler)
        return handler

    async def unsubscribe(self, subscription: Any) -> None:
        self.handlers.remove(subscription)

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        return None

    def deliver(self) -> None:
        held, self.sent = self.sent, []
        for payload in held:
            for handler in self.handlers:
                handler(payload)


async def test_published_waits_for_the_route_change_to_come_back_through_the_broadcast() -> None:
    held = HeldBroadcast()
    a, b = IngressRouter(RouteTable(), Counters()), IngressRouter(RouteTable(), Counters())
    await a.share(held, "a")
    await b.share(held, "b")
    try:
        a.route("shop--acme", ONE)
        waiting = asyncio.create_task(a.published())
        async with asyncio.timeout(5):
            while not held.sent:  # noqa: ASYNC110 - the sender published it
                await asyncio.sleep(0.01)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()  # sent, but not delivered: B could still route the old way
        assert b.table.get("shop--acme") is None
        held.deliver()
        async with asyncio.timeout(5):
            await waiting
        assert b.table.get("shop--acme") is not None  # delivered to all at once
    finally:
        await a.close()
        await b.close()
