"""Process helpers of the local driver."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from appdeck.runtime.procs import kill_and_reap
from tests.support.wait import until


async def test_kill_and_reap_returns_when_a_daemon_that_left_the_tree_holds_the_pipes(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "daemon.pid"
    # the daemon starts a session of its own and is reparented: kill_tree does not reach it,
    # and it keeps the step's stdout and stderr open
    script = f"(setsid sh -c 'echo $$ > {pid_file}; exec sleep 120' &); exec sleep 120"
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", script,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        await until(lambda: pid_file.exists() and pid_file.read_text().strip())
        async with asyncio.timeout(30):  # a bound for a loaded machine; the wait is 0.2 s
            await kill_and_reap(process, within=0.2)
        assert process.returncode == -signal.SIGKILL
        assert process.stdout is not None
        async with asyncio.timeout(30):
            assert await process.stdout.read() == b""  # its end, seen by the reader
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
