"""What the driver tells of its instances: real crashes (an exit status, a SIGKILL) seen in
``inspect`` and told to watchers; health checks that say what they saw."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from appdeck.runtime import InstanceEvent, LocalDriver, free_port
from appdeck.runtime.inspection import RecordedInstances

from .conftest import FAST_RESTARTS, HELLO, PYTHON, eventually, make_spec, wait_healthy

EXITS = HELLO.parent / "exits"


async def _ask(port: int, path: str) -> None:
    """GET ``path``; the app may die answering it (that is the point)."""
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        async with asyncio.timeout(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            await reader.read()
            writer.close()


async def _started(driver: LocalDriver, events: list[InstanceEvent]) -> int:
    driver.events(events.append)
    spec = make_spec(EXITS, env={}, run_command=f"exec {PYTHON} app.py")
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    return ref.port


async def test_an_app_that_exits_with_status_3_is_reported_with_its_status_and_restart(
    driver: LocalDriver,
) -> None:
    events: list[InstanceEvent] = []
    port = await _started(driver, events)
    [before] = driver.inspect("12-1")
    assert (before.state, before.restarts, before.last_exit) == ("running", 0, None)

    await _ask(port, "/exit?code=3")

    def restarted() -> bool:
        found = driver.inspect("12-1")
        return bool(found) and found[0].restarts == 1 and found[0].state == "running"

    await eventually(restarted, within=20)
    [after] = driver.inspect("12-1")
    assert after.last_exit == "status 3"
    assert after.oom_kills == 0
    assert after.memory_bytes is None  # unsandboxed: no cgroup to read
    assert [(e.app_id, e.release_id, e.index, e.kind) for e in events] == [
        (12, "12-1", 0, "crashed"),
        (12, "12-1", 0, "restarted"),
    ]
    texts = [line.text for line in (await driver.logs("12-1", "runtime", cursor=0)).lines]
    assert any(t.startswith("instance 0 exited unexpectedly (status 3) after") for t in texts)


async def test_an_app_killed_by_sigkill_is_reported_by_the_signals_name(
    driver: LocalDriver, runtime_dir: Path
) -> None:
    events: list[InstanceEvent] = []
    port = await _started(driver, events)
    await _ask(port, "/kill")

    def restarted() -> bool:
        found = driver.inspect("12-1")
        return bool(found) and found[0].restarts == 1 and found[0].state == "running"

    await eventually(restarted, within=20)
    assert driver.inspect("12-1")[0].last_exit == "signal SIGKILL"
    # what the operator's CLI reads from the data dir says the same
    recorded = RecordedInstances(runtime_dir, None).inspect("12-1")
    assert [(s.state, s.restarts, s.last_exit) for s in recorded] == [
        ("running", 1, "signal SIGKILL")
    ]


async def test_a_crash_loop_is_inspected_as_given_up_and_told_once(driver: LocalDriver) -> None:
    events: list[InstanceEvent] = []
    driver.events(events.append)
    spec = make_spec(env={"CRASH_ON_START": "1"})
    await driver.prepare(spec)
    await driver.launch(spec, 0, free_port())

    async def given_up() -> bool:
        return await driver.gave_up("12-1")

    await eventually(given_up, within=30)
    [status] = driver.inspect("12-1")
    assert status.state == "crash_loop"
    assert status.last_exit == "status 1"
    assert [e.kind for e in events].count("given_up") == 1
    await driver.stop("12-1")
    assert driver.inspect("12-1") == []  # stopped: no longer reported


async def test_a_health_check_on_a_port_nobody_listens_on_says_so(driver: LocalDriver) -> None:
    spec = make_spec(EXITS, env={}, run_command="exec sleep 30")
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    health = await driver.check(ref)
    assert not health.ok
    assert health.detail == f"nothing listening on $PORT={ref.port} (connection refused)"


async def test_a_health_check_that_gets_no_answer_says_it_timed_out(driver: LocalDriver) -> None:
    silent = (  # accepts connections and never answers
        f"exec {PYTHON} -c 'import os,socket,time; s=socket.socket(); "
        's.bind(("127.0.0.1", int(os.environ["PORT"]))); s.listen(); time.sleep(60)\''
    )
    spec = make_spec(EXITS, env={}, run_command=silent, health_timeout_s=0.3)
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())

    async def listening() -> bool:
        return "refused" not in (await driver.check(ref)).detail

    await eventually(listening, within=10)
    health = await driver.check(ref)
    assert health.detail == "GET /healthz timed out after 0.3s"


async def test_another_replicas_instance_is_inspected_from_its_record(
    driver: LocalDriver, runtime_dir: Path
) -> None:
    events: list[InstanceEvent] = []
    port = await _started(driver, events)
    await _ask(port, "/exit?code=3")

    def restarted() -> bool:
        found = driver.inspect("12-1")
        return bool(found) and found[0].restarts == 1 and found[0].state == "running"

    await eventually(restarted, within=20)
    other = LocalDriver(runtime_dir, restart=FAST_RESTARTS)  # a replica that started nothing
    try:
        [seen] = other.inspect("12-1")
        assert (seen.state, seen.restarts, seen.last_exit) == ("running", 1, "status 3")
    finally:
        await other.detach()
