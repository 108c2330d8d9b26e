"""start / health / stop: real instances on loopback, stopped without orphans."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from appdeck.common.errors import Conflict, FailedPrecondition
from appdeck.runtime import Driver, LocalDriver, free_port

from .conftest import (
    PYTHON,
    eventually,
    http_get,
    is_alive,
    make_spec,
    processes_under,
    wait_healthy,
)


def test_the_local_driver_implements_the_driver_interface(tmp_path: Path) -> None:
    assert isinstance(LocalDriver(tmp_path), Driver)


async def test_start_runs_the_app_with_port_host_and_env_and_health_is_ok(
    driver: LocalDriver,
) -> None:
    spec = make_spec(env={"GREETING": "hello there", "APP_VERSION_LABEL": "v7", "PORT": "1"})
    await driver.prepare(spec)
    port = free_port()
    ref = await driver.launch(spec, 0, port)
    assert (ref.release_id, ref.index, ref.port) == ("12-1", 0, port)
    assert ref.pid > 0
    await wait_healthy(driver, ref)
    health = await driver.check(ref)
    assert health.ok
    assert health.status == 200
    assert health.latency_ms >= 0
    status, body = await http_get(port, "/")
    assert status == 200
    answer = json.loads(body)
    assert answer["app"] == "hello"
    assert answer["greeting"] == "hello there"
    assert answer["version"] == "v7"
    assert answer["pid"] != ref.pid  # the app runs under the shim, in its process group
    assert os.getpgid(answer["pid"]) == ref.pid
    assert await driver.handles("12-1") == [ref]


async def test_start_tells_its_hooks_of_each_instance_before_it_is_healthy(
    driver: LocalDriver,
) -> None:
    spec = make_spec()
    await driver.prepare(spec)
    seen: list[tuple[str, int, str]] = []

    def failing(release: object, instance: object) -> None:
        raise RuntimeError("a failing hook fails no start")

    driver.started.append(lambda release, i: seen.append((release.route, i.index, i.upstream)))
    driver.started.append(failing)

    instance = await driver.start(spec, 0)

    assert seen == [(spec.route, 0, instance.upstream)]
    await driver.stop(instance.release_id)


async def test_health_is_not_ok_for_errors_closed_ports_and_silence(driver: LocalDriver) -> None:
    spec = make_spec(env={"FAIL_ALL": "1"})
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)  # /healthz still answers 200
    failing = await driver.check(ref, path="/")
    assert not failing.ok
    assert failing.status == 500
    assert "500" in failing.detail

    closed = await driver.check(ref.__class__("12-1", 5, free_port(), 0, 0.0))
    assert not closed.ok
    assert closed.status is None

    slow_spec = make_spec(release_id="12-2", env={"SLOW_START_S": "30"})
    await driver.prepare(slow_spec)
    slow = await driver.launch(slow_spec, 0, free_port())
    silent = await driver.check(slow, timeout_s=0.3)
    assert not silent.ok
    assert silent.status is None


async def test_several_instances_run_side_by_side_and_stop_one_by_one(
    driver: LocalDriver,
) -> None:
    spec = make_spec(instances=2)
    await driver.prepare(spec)
    first = await driver.launch(spec, 0, free_port())
    second = await driver.launch(spec, 1, free_port())
    await wait_healthy(driver, first)
    await wait_healthy(driver, second)
    with pytest.raises(Conflict):
        await driver.launch(spec, 1, free_port())
    await driver.stop("12-1", index=0, grace_s=2.0)
    assert await driver.handles("12-1") == [second]
    assert not is_alive(first.pid)
    assert (await driver.check(second)).ok


async def test_stop_kills_the_whole_process_group_grandchildren_included(
    driver: LocalDriver,
) -> None:
    # A grandchild in the group, one that left it (setsid), and the app ignoring SIGTERM.
    escape = "setsid sleep 1002 & " if shutil.which("setsid") else ""
    spec = make_spec(
        run_command=f"sleep 1000 & sh -c 'sleep 1001 & wait' & {escape}"
        f"trap '' TERM; exec {PYTHON} -c 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)'"
    )
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())

    def sleepers() -> list[int]:
        found = []
        for pid in processes_under(driver.runtime_dir):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if handle.read().startswith(b"sleep\x00100"):
                        found.append(pid)
            except OSError:
                continue
        return found

    expected = 3 if escape else 2
    await eventually(lambda: len(sleepers()) == expected, within=30.0)
    grandchildren = sleepers()
    await driver.stop("12-1", grace_s=0.5)
    for pid in [ref.pid, *grandchildren]:
        assert not is_alive(pid)
    assert processes_under(driver.runtime_dir) == []
    assert await driver.handles("12-1") == []
    texts = [line.text for line in (await driver.logs("12-1", "runtime", cursor=0)).lines]
    assert "instance 0 did not stop within 0.5s: killed" in texts


async def test_an_app_that_exits_leaves_no_grandchild_behind(driver: LocalDriver) -> None:
    spec = make_spec(run_command="sleep 1000 & sleep 0.2; exit 3")
    await driver.prepare(spec)
    await driver.launch(spec, 0, free_port())

    async def left_processes() -> bool:
        texts = [line.text for line in (await driver.logs("12-1", "runtime", cursor=0)).lines]
        return any("exited with code 3" in text for text in texts)

    await eventually(left_processes, within=30.0)
    texts = [line.text for line in (await driver.logs("12-1", "runtime", cursor=0)).lines]
    assert "stopping 1 leftover process(es) of the app" in texts
    await driver.stop("12-1")
    assert processes_under(driver.runtime_dir) == []


async def test_a_static_release_is_served_from_its_workspace(
    driver: LocalDriver, tmp_path: Path
) -> None:
    source = tmp_path / "site"
    source.mkdir()
    (source / "index.html").write_text("<h1>static</h1>")
    spec = make_spec(source, runtime="static", run_command=None, health_path="/")
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    status, body = await http_get(ref.port, "/index.html")
    assert (status, body) == (200, b"<h1>static</h1>")


async def test_start_before_prepare_is_refused(driver: LocalDriver) -> None:
    with pytest.raises(FailedPrecondition, match="no workspace") as info:
        await driver.launch(make_spec(), 0, free_port())
    assert info.value.hint
    assert "prepare" in info.value.hint
    assert await driver.releases() == []


async def test_stop_of_nothing_is_fine_and_remove_deletes_the_workspace(
    driver: LocalDriver,
) -> None:
    await driver.stop("99-1")
    spec = make_spec()
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    await driver.remove("12-1")
    assert not is_alive(ref.pid)
    assert not (driver.runtime_dir / "apps" / "12").exists()
    assert await driver.releases() == []
    await driver.remove("12-1")


async def test_an_instance_stopped_right_after_its_start_leaves_nothing(
    driver: LocalDriver,
) -> None:
    spec = make_spec()
    await driver.prepare(spec)
    for _ in range(3):
        ref = await driver.launch(spec, 0, free_port())
        await driver.stop("12-1", grace_s=2.0)
        assert not is_alive(ref.pid)
        assert processes_under(driver.runtime_dir) == []


async def test_the_app_inherits_no_descriptor_of_the_server(driver: LocalDriver) -> None:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        spec = make_spec(run_command="ls /proc/self/fd; exec sleep 1000")
        await driver.prepare(spec)
        await driver.launch(spec, 0, free_port())
        page = await driver.follow("12-1", "runtime", cursor=0, grep="2", timeout_s=5)
        assert page.lines
        await asyncio.sleep(0.2)
        fds = {
            line.text
            for line in (await driver.logs("12-1", "runtime", cursor=0)).lines
            if line.stream == "stdout"
        }
        assert {"0", "1", "2"} <= fds
        assert str(write_end) not in fds
    finally:
        os.close(read_end)
        os.close(write_end)
