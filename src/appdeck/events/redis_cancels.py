"""redis-py connections that do not lose a cancel (imported by replica mode only).

redis-py writes a command under ``asyncio.wait_for`` when the connection has a socket timeout
(ours always has: :data:`~appdeck.events.cluster.REDIS_TIMEOUT`). On Python 3.11 a cancel
that reaches ``wait_for`` just as the write ends is dropped: ``wait_for`` returns normally
(CPython gh-86296, fixed in 3.12). The cancelled task then goes on as if nothing had been
asked: a ``tools/call`` cancelled by its client counted on to the end, 100 s, in a CI run
(``test_a_cancel_sent_to_b_stops_a_call_running_on_a``). A loop of commands cancelled at a
random moment lost from one cancel in twelve (commands between sleeps) to 143 in 200 (back to
back) this way.

:func:`keeping_cancels` gives a connection class whose write notices that: a cancel asked
of the task while the write was under way (``Task.cancelling`` grew) and not raised is
raised once the write returns. The command was sent and its reply not read, so the
connection is closed first, as redis-py closes one whose write a cancel interrupts: the next
command on it would read this one's reply.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio.connection import AbstractConnection


class _KeepsCancels(AbstractConnection):
    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        task = asyncio.current_task()
        asked = task.cancelling() if task is not None else 0
        await super().send_packed_command(command, check_health)
        if task is not None and task.cancelling() > asked:
            await self.disconnect(nowait=True)
            raise asyncio.CancelledError


_made: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def keeping_cancels(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    """``cls`` (the pool's connection class: TCP, TLS or Unix socket) with the fix above."""
    if issubclass(cls, _KeepsCancels):
        return cls
    made = _made.get(cls)
    if made is None:
        made = _made[cls] = type(f"{cls.__name__}KeepingCancels", (_KeepsCancels, cls), {})
    return made
