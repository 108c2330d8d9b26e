"""The local driver on the one driver seam (:class:`~appdeck.runtime.driver.Driver`): it picks
the port, waits for readiness and says why an instance never got ready (the texts the deploy
engine's old adapter said, byte for byte: test_local_runtime.py's cases, on the driver), and
what it recovers after a restart stays usable with no cache above the driver."""

from __future__ import annotations

import dataclasses
import json
import select
import socket
import subprocess
import sys
from pathlib import Path

from appdeck.runtime import Capabilities, Driver, Instance, LocalDriver, Readiness
from appdeck.runtime.listening import explain, listening_ports
from appdeck.runtime.procs import free_port
from tests.runtime.conftest import FAST_RESTARTS, PYTHON, http_get, make_spec

SERVE = f"exec {PYTHON} -m http.server --bind 127.0.0.1"


def _is_a_driver(local: LocalDriver) -> Driver:
    return local  # mypy: the local driver has the seam's shape


def _port(instance: Instance) -> int:
    return int(instance.upstream.rsplit(":", 1)[1])


def test_an_unsandboxed_local_driver_says_what_it_can_do(driver: LocalDriver) -> None:
    assert isinstance(_is_a_driver(driver), Driver)
    assert driver.capabilities() == Capabilities(
        own_network=False,
        namespaced_upstreams=False,
        host_processes=True,
        in_place_restart=True,
        indexed_instances=True,
        driver_grep=True,
        app_disks=False,
    )


async def test_a_ready_instance_on_a_port_the_driver_picked(driver: LocalDriver) -> None:
    release = make_spec()
    await driver.prepare(release)
    instance = await driver.start(release, 0)
    assert instance.upstream.startswith("127.0.0.1:")
    assert instance.started_at > 0
    assert (await driver.wait_ready(release, instance, 30.0)).ok
    assert await driver.running(release.release_id) == [instance]
    assert not await driver.gave_up(release.release_id)
    await driver.stop(release.release_id, 0)
    assert await driver.running(release.release_id) == []
    gone = await driver.wait_ready(release, instance, 1.0)  # not running: said at once
    assert gone == Readiness(False, "no check answered")


async def test_an_app_on_a_fixed_port_is_told_to_listen_on_port(driver: LocalDriver) -> None:
    fixed = free_port()
    release = make_spec(run_command=f"{SERVE} {fixed}", health_path="/")
    await driver.prepare(release)
    instance = await driver.start(release, 0)
    ready = await driver.wait_ready(release, instance, 3.0)
    assert not ready.ok
    assert ready.why == (
        f"nothing listens on $PORT={_port(instance)}, but the app listens on {fixed}: listen "
        "on the port in $PORT"
    )


async def test_an_app_answering_404_is_told_what_it_answered(driver: LocalDriver) -> None:
    release = make_spec(run_command=f"{SERVE} $PORT", health_path="/healthz")
    await driver.prepare(release)
    instance = await driver.start(release, 0)
    ready = await driver.wait_ready(release, instance, 3.0)
    assert (ready.ok, ready.why) == (
        False,
        "GET /healthz answered 404: serve /healthz or change health_check",
    )


async def test_an_app_that_keeps_crashing_is_told_how_it_last_ended(driver: LocalDriver) -> None:
    release = make_spec(env={"CRASH_ON_START": "1"})
    await driver.prepare(release)
    instance = await driver.start(release, 0)
    ready = await driver.wait_ready(release, instance, 30.0)
    assert (ready.ok, ready.why) == (
        False,
        "the app kept crashing; it last ended with status 1 (the runtime log has its output)",
    )
    assert await driver.gave_up(release.release_id)


async def test_recovered_instances_serve_and_restart_in_place_with_a_fresh_env(
    runtime_dir: Path,
) -> None:
    """The risk of adoption after a restart (docs/runtime-seam.md): what ``recover`` returns
    is usable by ``wait_ready``, ``stop`` and the router with nothing cached above the
    driver, and a restart of the adopted release (index by index) runs the new env."""
    release = make_spec(instances=2)
    first = LocalDriver(runtime_dir, restart=FAST_RESTARTS, leftover_grace_s=1.0)
    await first.prepare(release)
    started = [await first.start(release, index) for index in (0, 1)]
    for instance in started:
        assert (await first.wait_ready(release, instance, 30.0)).ok
    await first.detach()  # the control plane restarts; the instances keep running
    again = LocalDriver(runtime_dir, restart=FAST_RESTARTS, leftover_grace_s=1.0)
    try:
        found = await again.recover(release)
        assert found.dead == []
        assert found.adopted == started  # same upstreams, same start times
        assert await again.running(release.release_id) == started
        for instance in found.adopted:
            assert (await again.wait_ready(release, instance, 10.0)).ok
        fresh = dataclasses.replace(release, env={"GREETING": "again"})
        for index in (0, 1):  # a restart: one index at a time, the release's id kept
            await again.stop(release.release_id, index, grace_s=1.0)
            restarted = await again.start(fresh, index)
            assert (await again.wait_ready(fresh, restarted, 30.0)).ok
            status, body = await http_get(_port(restarted), "/")
            assert (status, json.loads(body)["greeting"]) == (200, "again")
    finally:
        await again.stop(release.release_id, grace_s=1.0)
        await again.detach()


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
