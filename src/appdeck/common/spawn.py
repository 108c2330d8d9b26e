"""Starting a child process so that a cancel at any moment leaves nothing running.

``asyncio.create_subprocess_exec`` forks at once and then connects the pipes over a few loop
turns. A cancel that lands in those turns makes asyncio (3.11-3.13) SIGKILL the child alone and
then wait until every pipe of it closes: a grandchild holding one (``sh -c`` forks its
command; git starts its helpers) keeps the cancelled caller waiting, for as long as the
grandchild runs, and outlives it, since the caller never saw the process to kill its group.
:func:`spawn` lets the start finish under a shield and kills the child's whole session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any, Final

from appdeck.common.unwinding import to_the_end

REAP_WAIT_S: Final = 5.0
"""How long :func:`reap` waits, by default, for a killed process to be seen gone."""


async def spawn(program: str, *args: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec(program, *args, **kwargs)`` in a session of its own
    (its pid is its process group's). When the caller is cancelled meanwhile, the start is
    let finish, the child's process group is SIGKILLed and reaped (:func:`reap`), and the
    cancel goes on."""
    kwargs["start_new_session"] = True
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(program, *args, **kwargs)  # noqa: TID251 - the one place
    )
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        await to_the_end(_kill_started(starting))  # a second cancel must not cut it short
        raise


async def _kill_started(starting: asyncio.Future[asyncio.subprocess.Process]) -> None:
    try:
        process = await starting  # a few loop turns: the fork is done, the pipes connect
    except Exception:  # noqa: BLE001 - it did not start: nothing to kill
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    await reap(process, REAP_WAIT_S)


async def reap(process: asyncio.subprocess.Process, within: float) -> None:
    """Wait, at most ``within`` seconds, for a killed ``process`` to be seen gone. asyncio's
    ``wait()`` (3.11) also waits for every pipe of the process to close, and a daemon that left
    its group (a new session, reparented) may hold them forever: past ``within`` the pipes are
    closed from this side instead, and whoever reads them sees their end."""
    try:
        async with asyncio.timeout(within):
            await process.wait()
    except TimeoutError:
        transport = getattr(process, "_transport", None)  # asyncio keeps it private
        if transport is not None:
            transport.close()
