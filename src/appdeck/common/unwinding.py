"""Cleanup that a second cancel must not cut short.

A task can be cancelled more than once: a deploy on a replica hears the task's own cancel and
the relayed deploy cancel, a few milliseconds apart. The second lands while the first one's
``except CancelledError`` block is still unwinding (giving traffic back, stopping instances,
writing the end state), and would leave that work half done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def to_the_end(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end even if the caller is cancelled meanwhile, once or many times
    (``work`` must bound its own waits). The caller's cancel is not lost: it is still
    pending on the caller's task (``Task.cancelling``), which re-raises its own
    ``CancelledError`` after this returns, as an unwinding ``except`` block does."""
    task = asyncio.ensure_future(work)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():  # the work itself was cancelled: say so
                raise
