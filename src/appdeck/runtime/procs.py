"""Process helpers of the local driver: free ports, pidfds, process trees, and stopping what
a process group left behind (built on the ``/proc`` helpers of :mod:`.shim`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from typing import Final

from appdeck.common.spawn import REAP_WAIT_S, reap
from appdeck.runtime.model import InstanceState
from appdeck.runtime.shim import (
    ProcStat,
    all_procs,
    descendants,
    group_members,
    is_running,
    proc_stat,
    signal_quietly,
)

POLL_S: Final = 0.05
"""The longest wait between two looks at a stopping process."""
FIRST_POLL_S: Final = 0.005
"""The first wait: an app that exits on SIGTERM is gone within a few ms (its PID namespace
with it), and a stop sits on a rolling deploy's path (50 ms a look cost each stop ~40 ms)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (readable once it exits), or None where unsupported."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def process_tree(pid: int) -> dict[int, ProcStat]:
    """The process group led by ``pid`` and every descendant of ``pid``, by pid."""
    procs = all_procs()
    found = {proc.pid: proc for proc in group_members(pid, procs)}
    found.update((proc.pid, proc) for proc in descendants(pid, procs))
    return found


def kill_leftovers(pgid: int, leader_ticks: int, signum: int) -> None:
    """Signal what is left of the process group ``pgid`` whose leader (started at
    ``leader_ticks``) is gone. The kernel does not reuse a pid while it names a live process
    group, so remaining members are ours; but when a process with that pid exists and is not
    the leader we knew, the pgid belongs to someone else now."""
    leader = proc_stat(pgid)
    if leader is not None and leader.start_ticks != leader_ticks:
        return
    for proc in group_members(pgid):
        signal_quietly(proc.pid, signum, proc.start_ticks)


async def until_gone(
    pid: int,
    ticks: int,
    tree: dict[int, ProcStat],
    *,
    within: float,
    owner: InstanceState,
) -> bool:
    """Wait until ``pid`` and every process of ``tree`` are gone; False on timeout."""
    deadline, poll = time.monotonic() + within, FIRST_POLL_S
    while True:
        if owner.own_child:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG: reaps, never waits
        alive = is_running(pid, ticks) or any(
            is_running(proc.pid, proc.start_ticks) for proc in tree.values()
        )
        if not alive:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll)
        poll = min(poll * 1.5, POLL_S)


def kill_tree(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` and all descendants of ``pid``."""
    tree = process_tree(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for proc in tree.values():
        signal_quietly(proc.pid, signal.SIGKILL, proc.start_ticks)


async def kill_and_reap(process: asyncio.subprocess.Process, within: float = REAP_WAIT_S) -> None:
    """SIGKILL ``process``'s tree (:func:`kill_tree`) and wait, at most ``within`` seconds, for
    it to be seen gone (:func:`appdeck.common.spawn.reap`)."""
    kill_tree(process.pid)
    await reap(process, within)


def forget_process(instance: InstanceState) -> None:
    """Drop the instance's (exited) process: reap it when it is our child, close its pidfd."""
    if instance.own_child and instance.pid is not None:
        with contextlib.suppress(ChildProcessError):
            reaped, status = os.waitpid(instance.pid, os.WNOHANG)
            if reaped:
                instance.exit_code = os.waitstatus_to_exitcode(status)
    if instance.pidfd is not None:
        os.close(instance.pidfd)
    instance.pidfd = None
    if instance.netns_fd is not None:
        os.close(instance.netns_fd)
    instance.netns_fd = instance.netns_pid = None
    instance.pid = None
    instance.own_child = False
