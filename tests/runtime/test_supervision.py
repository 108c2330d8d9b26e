"""Supervision: a crashed instance is restarted with backoff; a crash loop marks the release
unhealthy."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal

from appdeck.runtime import LocalDriver, RestartPolicy, free_port

from .conftest import eventually, http_get, make_spec, processes_under, wait_healthy


def test_the_default_policy_backs_off_from_half_a_second_to_ten_and_allows_five_crashes() -> None:
    policy = RestartPolicy()
    assert (policy.initial_backoff_s, policy.max_backoff_s) == (0.5, 10.0)
    assert (policy.crash_limit, policy.window_s) == (5, 60.0)


async def test_a_crashed_instance_is_restarted_on_its_port_and_serves_again(
    driver: LocalDriver,
) -> None:
    spec = make_spec()
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    _, body = await http_get(ref.port, "/")
    app_pid = json.loads(body)["pid"]
    os.kill(app_pid, signal.SIGKILL)

    async def restarted() -> bool:
        current = await driver.handles("12-1")
        return bool(current) and current[0].pid != ref.pid and (await driver.check(current[0])).ok

    await eventually(restarted, within=10.0)
    [again] = await driver.handles("12-1")
    assert again.port == ref.port
    assert again.started_at > ref.started_at
    _, body = await http_get(ref.port, "/")
    assert json.loads(body)["pid"] != app_pid
    assert not await driver.gave_up("12-1")
    texts = [line.text for line in (await driver.logs("12-1", "runtime", cursor=0)).lines]
    assert f"pid {app_pid} killed by SIGKILL" in texts
    assert any(
        text.startswith("instance 0 exited unexpectedly (killed by SIGKILL) after")
        for text in texts
    ), texts


async def test_a_crash_loop_backs_off_exponentially_then_marks_the_release_unhealthy(
    driver: LocalDriver,
) -> None:
    spec = make_spec(env={"CRASH_ON_START": "1"})
    await driver.prepare(spec)
    await driver.launch(spec, 0, free_port())

    async def unhealthy() -> bool:
        return await driver.gave_up("12-1")

    await eventually(unhealthy, within=15.0)
    assert await driver.handles("12-1") == []
    lines = (await driver.logs("12-1", "runtime", cursor=0, limit=1000)).lines
    system = [line for line in lines if line.stream == "system"]
    delays = [
        float(match.group(1))
        for line in system
        if (match := re.search(r"restarting in ([\d.]+)s", line.text))
    ]
    assert delays == [0.05, 0.1, 0.2, 0.2, 0.2]  # doubling, capped (test policy)
    starts = [line.ts for line in system if line.text.startswith("started pid")]
    assert len(starts) == 6
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert all(gap >= delay for gap, delay in zip(gaps, delays, strict=True))
    assert "crash loop, not restarting; release marked unhealthy" in system[-1].text
    assert re.search(r"crashed 6 times within 60s \(status 1\): crash loop", system[-1].text)
    assert any("CRASH_ON_START=1" in line.text for line in lines if line.stream == "stderr")
    assert processes_under(driver.runtime_dir) == []

    # Sticky, and still known to a driver started later on the same directory.
    later = LocalDriver(driver.runtime_dir)
    assert await later.gave_up("12-1")
    await later.detach()
