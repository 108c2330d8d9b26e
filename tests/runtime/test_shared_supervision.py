"""Two drivers on one runtime directory (two replicas on one host): whichever supervises an
instance, a stop made by the other is never taken for a crash, and a crash is restarted once
(issue 20, item 1)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appdeck.common.errors import Conflict
from appdeck.runtime import LocalDriver, free_port
from appdeck.runtime.model import InstanceState, ReleaseState

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


async def two_adopted(driver: LocalDriver, other: LocalDriver) -> None:
    """Two healthy instances of release 12-1 started by ``driver``, adopted by ``other``."""
    spec = make_spec()
    await driver.prepare(spec)
    refs = [await driver.launch(spec, index, free_port()) for index in (0, 1)]
    for ref in refs:
        await wait_healthy(driver, ref)
    adopted = await other.take_over("12-1", spec)
    assert sorted(r.pid for r in adopted.adopted) == sorted(r.pid for r in refs)


def system_lines(runtime_dir: Path) -> list[str]:
    log = next(runtime_dir.glob("apps/12/releases/12-1/runtime.log"))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [line["text"] for line in lines if line["stream"] == "system"]


async def test_an_instance_stopped_by_one_driver_is_not_restarted_by_another_that_adopted_it(
    driver: LocalDriver, other: LocalDriver, runtime_dir: Path
) -> None:
    await two_adopted(driver, other)

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


def stop_elsewhere(runtime_dir: Path, release_id: str) -> BaseException | None:
    """Stop the release through a third driver on the same directory, on a thread and an
    event loop of its own (another server of this host, while this one is busy): what the
    stop raised, if anything."""
    failed: list[BaseException] = []

    async def stop() -> None:
        runtime = LocalDriver(runtime_dir, restart=FAST_RESTARTS, leftover_grace_s=1.0)
        try:
            await runtime.stop(release_id, grace_s=1.0)
        finally:
            await runtime.detach()

    def run() -> None:
        try:
            asyncio.run(stop())
        except BaseException as exc:  # handed to the test
            failed.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the other server's stop never ended"
    return failed[0] if failed else None


async def test_a_stop_made_elsewhere_while_an_instance_spawns_is_not_held_up_and_wins(
    driver: LocalDriver, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server stopped mid-spawn (SIGSTOP, a paused VM) held the release's lock, so another
    # server's stop of it (the takeover of an orphaned deploy) waited 60 s and failed, again
    # and again, for as long as the first was away. The spawn is now outside the lock: the
    # stop goes through, and the start it overtook kills what it spawned.
    spec = make_spec()
    await driver.prepare(spec)
    spawn = driver._spawn
    seen: list[BaseException | None] = []

    def spawn_then_stopped(state: ReleaseState, instance: InstanceState) -> None:
        spawn(state, instance)
        seen.append(stop_elsewhere(runtime_dir, "12-1"))  # while this one is "away"

    monkeypatch.setattr(driver, "_spawn", spawn_then_stopped)
    with pytest.raises(Conflict, match="was stopped while it started"):
        await driver.launch(spec, 0, free_port())
    assert seen == [None]  # the stop did not wait for the lock, nor fail
    assert driver._releases["12-1"].instances == {}
    state = runtime_dir / "apps" / "12" / "releases" / "12-1" / "instances.json"
    recorded = json.loads(await asyncio.to_thread(state.read_text))
    assert recorded["instances"] == [], recorded
    assert recorded["stops"] == {"*": 1}, recorded
    await eventually(lambda: shims(runtime_dir) == [], within=15.0)
    said = [t for t in system_lines(runtime_dir) if "is stopped as it starts" in t]
    assert len(said) == 1, system_lines(runtime_dir)

    monkeypatch.undo()  # the next start, with no stop in between, runs
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)


async def test_a_release_removed_by_one_driver_is_let_go_quietly_by_the_other(
    driver: LocalDriver,
    other: LocalDriver,
    runtime_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The adopter's supervisor saw the exit, took the release's lock and logged, by path, in
    # the directory being deleted: it made files there again, and the delete failed
    # ("Directory not empty", a `manage_app delete` error in the replicas' e2e suite).
    await two_adopted(driver, other)
    caplog.set_level(logging.INFO, logger="appdeck.runtime")

    await driver.remove("12-1")

    async def let_go() -> bool:
        return not other._releases["12-1"].instances

    await eventually(let_go, within=15.0)
    assert shims(runtime_dir) == []
    assert not (runtime_dir / "apps" / "12").exists()  # no release, nor one renamed away
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert failures == [], failures
