"""What the driver tells of sandboxed instances: memory and CPU from their cgroups (v1 on
this host: memory.usage_in_bytes, cpuacct.usage), and an OOM kill counted and told."""

from __future__ import annotations

import contextlib

from appdeck.runtime import InstanceEvent, LocalDriver

from .conftest import eventually
from .test_sandbox import HELLO, driver, probe, sandbox, spec, started

__all__ = ["driver", "sandbox"]  # the sandboxed driver, for the tests below

EXITS = HELLO.parent / "exits"


async def test_a_running_sandboxed_instance_reports_its_cgroups_memory_and_cpu(
    driver: LocalDriver,
) -> None:
    await started(driver, spec(60, EXITS))
    [status] = driver.inspect("60-1")
    assert status.state == "running"
    assert status.memory_bytes is not None
    assert status.memory_bytes > 1024 * 1024
    assert status.cpu_seconds is not None
    assert status.cpu_seconds > 0


async def test_an_app_past_its_memory_limit_is_reported_oom_killed_and_restarted(
    driver: LocalDriver,
) -> None:
    events: list[InstanceEvent] = []
    driver.events(events.append)
    ref = await started(driver, spec(61, EXITS, memory_mb=64))
    with contextlib.suppress(Exception):  # the app dies mid-answer
        await probe(driver, ref, "/hog?mb=256")

    def restarted() -> bool:
        found = driver.inspect("61-1")
        return bool(found) and found[0].restarts >= 1 and found[0].state == "running"

    await eventually(restarted, within=30)
    [status] = driver.inspect("61-1")
    assert status.oom_kills >= 1
    assert status.last_exit == "signal SIGKILL"
    assert "oom_killed" in [e.kind for e in events]
