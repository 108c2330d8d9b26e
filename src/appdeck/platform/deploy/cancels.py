"""Cancelling a deploy another replica drives.

A deploy's run lives in the process that took the app's lease (``DeployEngine.runs``). A
``deploy_app`` ``cancel`` that lands on another replica publishes ``deploy-cancel`` on the
cluster's broadcast; every replica hears it and the one whose ``runs`` holds that deployment
cancels it (the run unwinds as a ``tasks/cancel`` would unwind it). The sender then waits,
bounded, for the deployment to leave its in-progress states in the database, which every
replica reads. A lost message (Redis down at that moment) leaves the deploy running: the
caller sees it still in progress and may ask again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

log = logging.getLogger("appdeck.deploy")

CHANNEL: Final = "deploy-cancel"
MAX_MESSAGE: Final = 256
"""A cancel message's size bound (it names an app and a deployment number)."""


class Broadcast(Protocol):
    """What the relay needs of the cluster's broadcast (``appdeck.events.signals``)."""

    async def publish(self, channel: str, payload: bytes) -> None: ...

    async def subscribe(self, channel: str, handler: Callable[[bytes], None]) -> Any: ...

    async def unsubscribe(self, subscription: Any) -> None: ...


def encode(app_id: int, number: int) -> bytes:
    return json.dumps({"app": app_id, "number": number}).encode()


def decode(payload: bytes) -> tuple[int, int] | None:
    """The (app, number) a message names, or None when it is malformed."""
    if len(payload) > MAX_MESSAGE:
        return None
    try:
        body = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    app, number = body.get("app"), body.get("number")
    if type(app) is not int or type(number) is not int:
        return None
    return app, number


class CancelRelay:
    """Carries cancels to the replica that drives the deploy (in one process: nothing to do)."""

    def __init__(self, runs: Mapping[tuple[int, int], asyncio.Future[Any]]) -> None:
        self._runs = runs
        self._broadcast: Broadcast | None = None
        self._subscription: Any = None

    @property
    def shared(self) -> bool:
        return self._broadcast is not None

    async def attach(self, broadcast: Broadcast) -> None:
        """Hear other replicas' cancels (replica mode)."""
        self._broadcast = broadcast
        self._subscription = await broadcast.subscribe(CHANNEL, self._receive)

    async def detach(self) -> None:
        if self._broadcast is not None and self._subscription is not None:
            await self._broadcast.unsubscribe(self._subscription)
        self._subscription = None

    async def ask(self, app_id: int, number: int) -> None:
        """Ask whichever replica drives ``(app_id, number)`` to cancel it."""
        if self._broadcast is None:
            return
        await self._broadcast.publish(CHANNEL, encode(app_id, number))

    def _receive(self, payload: bytes) -> None:
        key = decode(payload)
        if key is None:
            log.warning("dropped a malformed deploy-cancel message (%d bytes)", len(payload))
            return
        run = self._runs.get(key)
        if run is not None and not run.done():
            log.info("deployment %d-%d cancelled at another replica's request", *key)
            run.cancel()
