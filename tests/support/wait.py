"""Bounded waiting for tests: never sleep without a limit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(
    predicate: Callable[[], object], within: float = 30.0, interval: float = 0.01
) -> None:
    """Poll ``predicate`` until it is truthy; TimeoutError after ``within`` seconds (30 by
    default: a bound against hanging, with the margin a loaded 2-core CI machine needs;
    never a measure of speed)."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - a bounded poll of state without an event
            await asyncio.sleep(interval)
