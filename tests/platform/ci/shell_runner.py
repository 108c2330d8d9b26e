"""A CI runner for the platform-on-fakes tests: the test command runs as a plain shell in the
checkout (no sandbox, no build steps), with the job's deadline; the sandboxed runner is
tested against the real driver in test_runner.py."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

from appdeck.common.spawn import spawn
from appdeck.platform.ci.runner import Job, Outcome


class ShellRunner:
    def __init__(self) -> None:
        self.jobs: list[Job] = []

    async def run(self, job: Job, mask: Callable[[str], str]) -> Outcome:
        self.jobs.append(job)
        process = await spawn(
            "/bin/sh",
            "-c",
            job.test_command,
            cwd=job.source,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **job.env},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(job.timeout_s):
                out, _ = await process.communicate()
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)  # the shell and what it started
            await process.wait()
            return Outcome("timed_out", None, "timed out", "")
        except asyncio.CancelledError:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        log = mask(out.decode(errors="replace"))
        if process.returncode == 0:
            return Outcome("passed", 0, "the tests passed", log)
        return Outcome("failed", process.returncode, f"exit {process.returncode}", log)
