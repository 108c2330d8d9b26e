"""Run a coroutine's first step in the caller's stack, as Python 3.12's eager tasks do.

The fan-out of one event to 1,000 GET streams (issue 26 §4) wrote each stream from its own
task: 1,000 wake-ups, each through the reader's inbox, a timeout and its scheduling, for a
write that never waits (an ASGI ``send`` of an SSE chunk appends to the transport's buffer).
:func:`start_eagerly` runs such a send where the event is published instead. When the send
does wait (the client reads slowly and the transport paused writing), what is left of it is
handed back as :class:`Rest`, an awaitable that the stream's own reader awaits before anything
else it writes, so the stream keeps its order and the publisher is never held up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Generator
from typing import Any


class Rest:
    """What is left of a coroutine that suspended in :func:`start_eagerly`; await it once.

    Awaiting it passes on the future the coroutine waits for (as the coroutine would have,
    had a task driven it from the start), then drives the coroutine on, passing on any
    exception thrown in (a cancellation of the awaiting task reaches the coroutine).
    """

    __slots__ = ("_coro", "_waiting")

    def __init__(self, coro: Coroutine[Any, Any, None], waiting: Any) -> None:
        self._coro = coro
        self._waiting = waiting

    def __await__(self) -> Generator[Any, None, None]:
        waiting = self._waiting
        while True:
            try:
                yield waiting
            except BaseException as exc:  # noqa: BLE001 - thrown into the coroutine, as a task would
                try:
                    waiting = self._coro.throw(exc)
                except StopIteration:
                    return
                continue
            try:
                waiting = self._coro.send(None)
            except StopIteration:
                return


def start_eagerly(step: Awaitable[None]) -> Rest | None:
    """Run ``step`` (a coroutine, as an ASGI ``send`` returns) until it finishes (None) or
    first waits (its :class:`Rest`). An exception it raises before waiting propagates here."""
    coro = step if isinstance(step, Coroutine) else _awaiting(step)
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    return Rest(coro, waiting)


async def _awaiting(step: Awaitable[None]) -> None:
    await step
