"""The data plane's lease: a holder stopped (SIGSTOP) past its lease is taken over, and
changes nothing once it runs again; a running holder keeps it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from appdeck.ingress.haproxy.lease import LeaseBusy, PlaneLease

HOLDER = """
import asyncio, sys
from pathlib import Path
from appdeck.ingress.haproxy.lease import LeaseLost, PlaneLease

async def main() -> None:
    lease = PlaneLease(Path(sys.argv[1]), ttl=0.5)
    async with lease.hold() as held:
        print("held", held.fence, flush=True)
        while True:
            await asyncio.sleep(0.05)
            try:
                held.check()
            except LeaseLost:
                print("lost", flush=True)
                return

asyncio.run(main())
"""


async def test_a_holder_stopped_past_its_lease_is_taken_over_and_changes_nothing_after(
    tmp_path: Path,
) -> None:
    path = tmp_path / "lease"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, str(path), stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    try:
        async with asyncio.timeout(60):  # a bound, not a speed
            said = (await child.stdout.readline()).split()
            assert said[0] == b"held"
            os.kill(child.pid, signal.SIGSTOP)  # stopped while it holds the lease
            async with PlaneLease(path).hold(wait_s=30) as taken:
                assert taken.fence == int(said[1]) + 1
                os.kill(child.pid, signal.SIGCONT)
                assert await child.stdout.readline() == b"lost\n"  # it learns, and stops
                taken.check()  # still the taker's
            assert await child.wait() == 0
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


async def test_a_running_holder_keeps_its_lease_past_the_ttl_and_lets_it_go_after(
    tmp_path: Path,
) -> None:
    first = PlaneLease(tmp_path / "lease", ttl=1.0)
    second = PlaneLease(tmp_path / "lease", ttl=1.0)
    async with first.hold() as held:
        await asyncio.sleep(3.0)  # three of its lease's lengths: renewed meanwhile
        held.check()
        with pytest.raises(LeaseBusy):
            async with second.hold(wait_s=0):
                pass
    async with second.hold(wait_s=0) as taken:  # let go: free at once
        assert taken.fence == held.fence + 1
