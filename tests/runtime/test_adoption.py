"""After a server restart, even after kill -9, running instances are adopted; dead ones are
reported, and what they left behind is stopped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from appdeck.common.errors import Conflict
from appdeck.runtime import LocalDriver, free_port
from appdeck.runtime.model import Handle

from .conftest import (
    FAST_RESTARTS,
    HELLO,
    eventually,
    http_get,
    is_alive,
    make_spec,
    processes_under,
    wait_healthy,
)

HELPER = Path(__file__).with_name("server_helper.py")


async def _server_that_dies(runtime_dir: Path, port: int, *, then: str) -> Handle:
    """Run a server process that starts the hello app, and kill it with SIGKILL (or let it
    ``os._exit``) once the app is healthy. Returns the instance it started."""
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HELPER),
        str(runtime_dir),
        str(HELLO),
        str(port),
        "--then",
        then,
        stdout=asyncio.subprocess.PIPE,
        cwd=runtime_dir,
    )
    try:
        assert server.stdout is not None
        async with asyncio.timeout(30):
            line = await server.stdout.readline()
        assert line, "the server helper exited before starting the app"
        if then == "wait":
            server.send_signal(signal.SIGKILL)
    finally:
        if server.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                server.kill()
        async with asyncio.timeout(10):
            await server.wait()
    return Handle(**json.loads(line))


async def test_an_instance_survives_a_kill_9_of_the_server_and_is_adopted(
    driver: LocalDriver, runtime_dir: Path
) -> None:
    port = free_port()
    before = await _server_that_dies(runtime_dir, port, then="wait")
    assert is_alive(before.pid)

    # Nobody supervises the app now, but it still serves and still logs.
    status, _ = await http_get(port, "/fail")
    assert status == 500

    async def logged_while_down() -> bool:  # the app logs a request after answering it
        page = await driver.logs("12-1", "runtime", cursor=0, grep='"GET /fail HTTP/1.1" 500')
        return bool(page.lines)

    await eventually(logged_while_down)

    adoption = await driver.take_over("12-1")
    assert adoption.dead == []
    assert adoption.adopted == [before]
    assert await driver.handles("12-1") == [before]
    assert (await driver.check(before)).ok  # the health path comes from release.json
    _, body = await http_get(port, "/")
    assert json.loads(body)["greeting"] == "from before the crash"

    page = await driver.follow("12-1", "runtime", cursor=0, grep="GET / HTTP", timeout_s=5)
    assert page.lines
    texts = [line.text for line in (await driver.logs("12-1", "runtime", cursor=0)).lines]
    request_while_down = next(i for i, t in enumerate(texts) if '"GET /fail HTTP/1.1" 500' in t)
    adopted_at = texts.index(f"instance 0 (pid {before.pid}) adopted after a restart")
    assert request_while_down < adopted_at  # logged while no server was running
    assert await driver.take_over("12-1") == type(adoption)(adopted=[before], dead=[])

    # Adopted instances are supervised like our own: a crash is restarted.
    os.kill(json.loads(body)["pid"], signal.SIGKILL)

    async def restarted() -> bool:
        current = await driver.handles("12-1")
        return (
            bool(current) and current[0].pid != before.pid and (await driver.check(current[0])).ok
        )

    await eventually(restarted, within=10.0)
    await driver.stop("12-1", grace_s=2.0)
    assert not is_alive(before.pid)
    assert processes_under(runtime_dir) == []


async def test_an_instance_that_died_with_the_server_is_reported_and_its_leftovers_stopped(
    driver: LocalDriver, runtime_dir: Path
) -> None:
    port = free_port()
    before = await _server_that_dies(runtime_dir, port, then="exit")
    _, body = await http_get(port, "/")
    app_pid = json.loads(body)["pid"]
    # While no server runs, the shim dies (OOM killer, an operator): the app is orphaned.
    os.kill(before.pid, signal.SIGKILL)
    await eventually(lambda: not is_alive(before.pid), within=30.0)
    assert is_alive(app_pid)

    adoption = await driver.take_over("12-1")
    assert adoption.adopted == []
    assert [(ref.index, ref.port) for ref in adoption.dead] == [(0, port)]
    await eventually(lambda: not is_alive(app_pid), within=30.0)  # no orphan keeps the port

    spec = make_spec(env={"GREETING": "restarted"})
    ref = await driver.launch(spec, adoption.dead[0].index, adoption.dead[0].port)
    await wait_healthy(driver, ref)
    _, body = await http_get(port, "/")
    assert json.loads(body)["greeting"] == "restarted"


async def test_an_unadopted_instance_blocks_a_second_start_and_can_still_be_stopped(
    driver: LocalDriver, runtime_dir: Path
) -> None:
    port = free_port()
    before = await _server_that_dies(runtime_dir, port, then="wait")
    with pytest.raises(Conflict, match="unsupervised"):
        await driver.launch(make_spec(), 0, free_port())
    await driver.stop("12-1", grace_s=2.0)
    assert not is_alive(before.pid)
    assert processes_under(runtime_dir) == []
    nothing = await driver.take_over("99-9")
    assert (nothing.adopted, nothing.dead) == ([], [])


async def test_a_copy_of_the_data_dir_neither_adopts_nor_kills_the_originals_instances(
    driver: LocalDriver, runtime_dir: Path, tmp_path: Path
) -> None:
    port = free_port()
    before = await _server_that_dies(runtime_dir, port, then="wait")
    copy = tmp_path / "copy" / "runtime"
    shutil.copytree(runtime_dir, copy, symlinks=True)  # instances.json names the original's
    other = LocalDriver(copy, restart=FAST_RESTARTS, leftover_grace_s=1.0)
    try:
        adoption = await other.take_over("12-1")
    finally:
        await other.detach()
    assert adoption.adopted == []
    assert [ref.pid for ref in adoption.dead] == [before.pid]
    assert is_alive(before.pid)  # the original's instance runs on, unsignalled
    status, _ = await http_get(port, "/")
    assert status == 200
    assert (await driver.take_over("12-1")).adopted  # its own server still adopts it
    await driver.stop("12-1", grace_s=2.0)
