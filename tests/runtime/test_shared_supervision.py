"""Two drivers on one runtime directory (two replicas on one host): whichever supervises an
instance, a stop made by the other is never taken for a crash, and a crash is restarted once
(issue 20, item 1)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appdeck.runtime import LocalDriver, free_port

from .conftest import FAST_RESTARTS, eventually, http_get, make_spec, wait_healthy


@pytest.fixture
async def other(runtime_dir: Path) -> AsyncIterator[LocalDriver]:
    """A second driver on the same runtime directory (another replica on this host)."""
    runtime = LocalDriver(runtime_dir, restart=FAST_RESTARTS, leftover_grace_s=1.0)
    try:
        yield runtime
    finally:
        await runtime.detach()


def shims(runtime_dir: Path) -> list[int]:
    """Pids of the instance shims running under ``runtime_dir`` (one per instance)."""
    root = str(runtime_dir.resolve())
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        shim = any(a.endswith(b"/shim.py") for a in argv)
        if shim and state not in (b"Z", b"X") and any(a.startswith(root.encode()) for a in argv):
            found.append(int(name))
    return found


def system_lines(runtime_dir: Path) -> list[str]:
    log = next(runtime_dir.glob("apps/12/releases/12-1/runtime.log"))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [line["text"] for line in lines if line["stream"] == "system"]


async def test_an_instance_stopped_by_one_driver_is_not_restarted_by_another_that_adopted_it(
    driver: LocalDriver, other: LocalDriver, runtime_dir: Path
) -> None:
    spec = make_spec()
    await driver.prepare(spec)
    refs = [await driver.launch(spec, index, free_port()) for index in (0, 1)]
    for ref in refs:
        await wait_healthy(driver, ref)
    adopted = await other.take_over("12-1", spec)
    assert sorted(r.pid for r in adopted.adopted) == sorted(r.pid for r in refs)

    await driver.stop("12-1", 0, grace_s=2.0)  # one instance, then the rest
    await driver.stop("12-1", grace_s=2.0)

    async def let_go() -> bool:  # the adopter's supervisors saw the exits and ended
        return not other._releases["12-1"].instances

    await eventually(let_go, within=15.0)
    assert shims(runtime_dir) == []
    texts = system_lines(runtime_dir)
    assert not [t for t in texts if "exited unexpectedly" in t], texts


async def test_an_instance_started_on_one_driver_is_stopped_by_the_other(
    driver: LocalDriver, other: LocalDriver, runtime_dir: Path
) -> None:
    spec = make_spec()
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    await other.take_over("12-1", spec)
    await other.stop("12-1", grace_s=2.0)  # the one that did not start it

    async def let_go() -> bool:
        return not driver._releases["12-1"].instances

    await eventually(let_go, within=15.0)
    assert shims(runtime_dir) == []
    texts = system_lines(runtime_dir)
    assert not [t for t in texts if "exited unexpectedly" in t], texts


async def test_a_crash_seen_by_two_drivers_is_restarted_once_and_both_follow_it(
    driver: LocalDriver, other: LocalDriver, runtime_dir: Path
) -> None:
    spec = make_spec()
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    await other.take_over("12-1", spec)
    _, body = await http_get(ref.port, "/")
    os.kill(json.loads(body)["pid"], signal.SIGKILL)

    async def both_on_one_new_process() -> bool:
        pids = {
            instance.pid
            for runtime in (driver, other)
            for instance in runtime._releases["12-1"].instances.values()
        }
        return len(pids) == 1 and None not in pids and ref.pid not in pids

    await eventually(both_on_one_new_process, within=15.0)
    assert len(shims(runtime_dir)) == 1
    [again] = await driver.handles("12-1") or await other.handles("12-1")
    await wait_healthy(driver, again)
    restarts = [t for t in system_lines(runtime_dir) if t.startswith("started pid")]
    assert len(restarts) == 2, restarts  # the first start and one restart
