"""The deploy engine's runtime port on the real local driver: a failed health check says what
it saw (issue 20, item 9), from the kernel's account of the instance's sockets."""

from __future__ import annotations

import contextlib
import select
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appdeck.platform.deploy.local_runtime import LocalRuntime
from appdeck.runtime import LocalDriver
from appdeck.runtime.listening import explain, listening_ports
from appdeck.runtime.procs import free_port
from tests.runtime.conftest import (
    FAST_RESTARTS,
    PYTHON,
    kill_everything_under,
    make_spec,
)

SERVE = f"exec {PYTHON} -m http.server --bind 127.0.0.1"


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[LocalDriver]:
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir()
    local = LocalDriver(runtime_dir, restart=FAST_RESTARTS, leftover_grace_s=1.0)
    try:
        yield local
    finally:
        for release_id in await local.releases():
            with contextlib.suppress(Exception):
                await local.stop(release_id, grace_s=1.0)
        await local.detach()
        kill_everything_under(runtime_dir)


async def test_an_app_on_a_fixed_port_is_told_to_listen_on_port(driver: LocalDriver) -> None:
    fixed = free_port()
    release = make_spec(run_command=f"{SERVE} {fixed}", health_path="/")
    runtime = LocalRuntime(driver)
    await runtime.prepare(release)
    instance = await runtime.start(release, 0)
    assert not await runtime.wait_healthy(release, instance, 3.0)
    why = await runtime.why_unhealthy(release, instance)
    port = int(instance.upstream.rsplit(":", 1)[1])
    assert why == (
        f"nothing listens on $PORT={port}, but the app listens on {fixed}: listen on the port "
        "in $PORT"
    )


async def test_an_app_answering_404_is_told_what_it_answered(driver: LocalDriver) -> None:
    release = make_spec(run_command=f"{SERVE} $PORT", health_path="/healthz")
    runtime = LocalRuntime(driver)
    await runtime.prepare(release)
    instance = await runtime.start(release, 0)
    assert not await runtime.wait_healthy(release, instance, 3.0)
    why = await runtime.why_unhealthy(release, instance)
    assert why == "GET /healthz answered 404: serve /healthz or change health_check"


async def test_an_app_that_keeps_crashing_is_told_how_it_last_ended(driver: LocalDriver) -> None:
    release = make_spec(env={"CRASH_ON_START": "1"})
    runtime = LocalRuntime(driver)
    await runtime.prepare(release)
    instance = await runtime.start(release, 0)
    assert not await runtime.wait_healthy(release, instance, 30.0)
    why = await runtime.why_unhealthy(release, instance)
    assert (
        why == "the app kept crashing; it last ended with status 1 (the runtime log has its output)"
    )


def test_only_the_instances_own_sockets_count_on_the_hosts_network() -> None:
    other = socket.create_server(("127.0.0.1", 0))  # this test's, not the child's
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket,time; s=socket.create_server(('127.0.0.1',0));"
            "print(s.getsockname()[1], flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 10.0)
        assert ready, "the child never said its port"
        port = int(child.stdout.readline())
        found = listening_ports(child.pid, own_netns=False)
        assert found == {port}
        assert other.getsockname()[1] not in (found or set())
    finally:
        child.kill()
        child.wait(10)
        other.close()
        if child.stdout is not None:
            child.stdout.close()
    assert listening_ports(child.pid, own_netns=False) is None  # gone: can't be told


def test_the_explanation_names_the_ports() -> None:
    assert explain(8000, {8000}) is None
    assert explain(8000, None) is None
    assert (
        explain(8000, set()) == "nothing listens on $PORT=8000 (the app listens on no TCP port yet)"
    )
