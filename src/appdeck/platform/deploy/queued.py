"""A deploy that waits its turn: what a push (a webhook, a poll, ``git push``, a green CI run)
asks for is deployed after the deploy under way, not dropped because one is under way.

A person calling ``deploy_app`` while a deploy runs is told so (``conflict``) and decides; a
push has nobody to tell, and its commit is the newest code. So the push's deploy is tried
again every :data:`EVERY_S` until the app is free, for at most :data:`WITHIN_S`, and only
while the commit is still the branch's newest: of several pushes during one deploy, only
the last is deployed (the others are superseded, and said so in the log). The wait polls
the database, so it works across replicas: any replica may have the app's lease.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from appdeck.platform.deploy.policy import DeployBusy

log = logging.getLogger("appdeck.deploy")
T = TypeVar("T")

EVERY_S: Final = 2.0
"""How often a waiting push tries again."""
WITHIN_S: Final = 1800.0
"""How long it waits at most (a build and a canary can take many minutes)."""


async def when_free(
    attempt: Callable[[], Awaitable[T]],
    still_wanted: Callable[[], Awaitable[bool]],
    *,
    every_s: float = EVERY_S,
    within_s: float = WITHIN_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T | None:
    """``attempt()``'s result once the app is free; None when, while waiting, the commit
    stopped being wanted (a newer push). ``DeployBusy`` past ``within_s``; any other refusal
    at once."""
    waited = 0.0
    while True:
        try:
            return await attempt()
        except DeployBusy as exc:
            if waited >= within_s:
                raise
            if waited == 0.0:
                log.info("a pushed commit waits for the deploy under way: %s", exc.message)
        await sleep(every_s)
        waited += every_s
        if not await still_wanted():
            log.info("a pushed commit was superseded by a newer push while it waited")
            return None
