from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import pytest

from appdeck.common.spawn import spawn


def _running_with(marker: str) -> list[int]:
    """Pids whose command line holds ``marker`` (a zombie's is empty: it runs no more)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv:
            found.append(int(entry.name))
    return found


async def _start_then_read(marker: str, landed: list[str]) -> None:
    """A shell that forks a long sleep holding its stdout (as ``sh -c`` of a test command)."""
    try:
        process = await spawn(
            "/bin/sh",
            "-c",
            f"sleep {marker}; echo late",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except asyncio.CancelledError:
        landed.append("start")
        raise
    landed.append("started")
    try:
        await process.communicate()
    finally:
        os.killpg(process.pid, 9)


@pytest.mark.parametrize("turns", [1, 2, 3])
async def test_a_cancel_while_the_child_starts_ends_at_once_and_leaves_nothing_running(
    turns: int,
) -> None:
    marker = f"30.{secrets.randbelow(10**6):06d}"  # sleep's own argument: 30 s
    landed: list[str] = []
    task = asyncio.create_task(_start_then_read(marker, landed))
    for _ in range(turns):  # the fork is done, asyncio still connects the pipes
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10):  # without the kill: the 30 s of the sleep
            await task
    assert landed == ["start"]
    assert _running_with(marker) == []


async def test_a_second_cancel_does_not_cut_the_kill_short() -> None:
    marker = f"30.{secrets.randbelow(10**6):06d}"
    landed: list[str] = []
    task = asyncio.create_task(_start_then_read(marker, landed))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await task
    assert landed == ["start"]
    assert _running_with(marker) == []


async def test_a_started_child_leads_a_session_of_its_own() -> None:
    process = await spawn("/bin/sh", "-c", "read line; exit 3", stdin=asyncio.subprocess.PIPE)
    try:
        assert os.getsid(process.pid) == process.pid  # it waits for its line: still there
    finally:
        await process.communicate(b"\n")
    assert process.returncode == 3
