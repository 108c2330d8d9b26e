"""The ``tools/call`` requests running in this process, by session and request id, and
their cancellation by ``notifications/cancelled`` (the client's, or one forwarded by another
replica: :mod:`appdeck.protocol.relay`).

A cancel cancels the task running the call; the call then ends with
:class:`RequestCancelled` (no response is sent). A cancel is checked to have taken: at
:data:`CANCEL_CHECKS` a call still in flight whose task has no cancellation pending (its code
took the cancel for its own, with an ``uncancel()``, as a timeout of its own does) is
cancelled again, and one whose cancellation is pending but still runs is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

log = logging.getLogger("appdeck.protocol")
T = TypeVar("T")
Key = tuple[str, Any]
"""(session id, request id)."""

CANCEL_CHECKS = (2.0, 4.0, 8.0)
"""Seconds after a cancel at which a call still running is checked (see the module)."""


class RequestCancelled(Exception):
    """The client cancelled the request (notifications/cancelled): no response is sent."""


class _InFlight:
    """A running tools/call: its task, and whether the client cancelled it."""

    __slots__ = ("cancelled", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.cancelled = False


class InFlightCalls:
    """The calls running here (see the module)."""

    def __init__(self) -> None:
        self._calls: dict[Key, _InFlight] = {}

    async def run(self, key: Key, call: Awaitable[T]) -> T:
        """Await ``call`` in this task, noted under ``key`` for :meth:`cancel` while it runs;
        :class:`RequestCancelled` when a cancel ended it."""
        current = asyncio.current_task()
        if current is None:
            return await call
        entry = self._calls[key] = _InFlight(current)
        try:
            return await call
        except asyncio.CancelledError:
            if entry.cancelled and current.uncancel() == 0:
                raise RequestCancelled from None
            raise
        finally:
            if self._calls.get(key) is entry:
                del self._calls[key]

    def cancel(self, key: Key) -> bool:
        """Cancel the call ``key`` if it runs here (True), once however often asked."""
        entry = self._calls.get(key)
        if entry is None:
            return False
        if not entry.cancelled:  # a forwarded cancel may come again before it is acked:
            entry.cancelled = True  # a second cancel() would outlive the call's own unwinding
            entry.task.cancel()
            self._check(key, entry, 0)
        return True

    def _check(self, key: Key, entry: _InFlight, checks: int) -> None:
        if checks >= len(CANCEL_CHECKS):
            return
        wait = CANCEL_CHECKS[checks]

        def check() -> None:
            task = entry.task
            if self._calls.get(key) is not entry or task.done():
                return  # the call ended (its task may go on to other work)
            if task.cancelling() == 0:  # consumed without ending the call: again
                log.warning("request %r went on after its cancel; cancelled again", key[1])
                task.cancel()
            else:  # unwinding slowly, or a library dropped the cancel: where it is says which
                late = "request %r still runs %.0f s after its cancel, in %s"
                log.warning(late, key[1], wait, _where(task))
            self._check(key, entry, checks + 1)

        asyncio.get_running_loop().call_later(wait, check)


def _where(task: asyncio.Task[Any], depth: int = 3) -> str:
    """Where ``task`` waits: its innermost ``depth`` frames, innermost first."""
    frames: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            file = code.co_filename.rsplit("/", 1)[-1]
            frames.append(f"{code.co_name} ({file}:{frame.f_lineno})")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return " < ".join(reversed(frames[-depth:])) if frames else "an unknown place"
