"""Pinned before the runtime seam refactor (docs/runtime-seam.md, step 0): what the deploy
engine asks of the runtime and the router, call by call, for each strategy and operation, and
the steps it records. A refactor of the seam may rename the port's methods; it must not change
these sequences, upstreams, route weights or step messages.

The calls are written in words of the fakes (tests/platform/deploy/fakes.py): ``prepare R``,
``start R#i <upstream>``, ``ready? R#i`` (the health wait), ``stop R`` / ``stop R#i``,
``running R``, ``recover R`` (adoption), ``route <key> R=w[upstreams]``, ``unroute <key>`` and
``mark <key> R``. ``R1``, ``R2``, ... are the app's releases 1, 2, ... The canary's polls (its
crash-loop check and error window) are left out: how many there are depends on the clock.

Already pinned elsewhere, not repeated here: the health check's ``why`` texts on the real
driver (crash loop, status, not listening: tests/runtime/test_readiness.py), a push's webhook answers
``deploying`` / ``ignored`` (pong, other branch, other event, deleted branch) / ``recorded``
(repos/test_push_deploy.py) and ``testing`` (ci/test_service.py) as statuses; their full
answers (status, commit, reason) are pinned in repos/test_push_answers.py.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from appdeck.platform.changes import Change
from appdeck.platform.deploy.ports import Instance, Release
from appdeck.storage import Storage
from appdeck.storage.deployments import DeploymentRecord

from .test_engine import SHOP, Rig, make_rig

RESTART_OF_TWO = [
    # two instances of R1 restarted: a spare at index 2, then each in turn, then the spare goes
    "running R1",
    "start R1#2 127.0.0.1:20002",
    "ready? R1#2",
    f"route {SHOP} R1=100['127.0.0.1:20001', '127.0.0.1:20002']",
    "stop R1#0",
    "start R1#0 127.0.0.1:20003",
    "ready? R1#0",
    f"route {SHOP} R1=100['127.0.0.1:20003', '127.0.0.1:20002']",
    "stop R1#1",
    "start R1#1 127.0.0.1:20004",
    "ready? R1#1",
    f"route {SHOP} R1=100['127.0.0.1:20003', '127.0.0.1:20004']",
    "stop R1#2",
]


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> Rig:
    return await make_rig(storage, tmp_path)


def _calls(rig: Rig) -> list[str]:
    """The runtime's and the router's calls in one sequence, releases as ``R<number>``."""
    prefix = re.compile(rf"\b{rig.app_id}-(\d+)")
    return [prefix.sub(r"R\1", call) for call in rig.runtime.calls]


async def _steps(rig: Rig, number: int) -> list[tuple[str, str]]:
    record = await rig.deploys.store.get(rig.app_id, number)
    assert record is not None
    return [(s["state"], s["message"]) for s in record.steps]


def _share(rig: Rig) -> None:
    """The router writes into the runtime's list: one sequence of both."""
    rig.router.calls = rig.runtime.calls


async def _live_first(rig: Rig) -> None:
    _share(rig)
    assert await rig.deploy() == "live"
    rig.runtime.calls.clear()


FIRST = [
    ("queued", "Queued"),
    ("building", "Building: copying the source and running the build command"),
    ("starting", "Starting the new release (rolling)"),
    ("starting", "Starting instance 1 of 2"),
    ("starting", "Instance 1 of 2 serves traffic"),
    ("starting", "Starting instance 2 of 2"),
    ("starting", "Instance 2 of 2 serves traffic"),
    ("starting", "All traffic on the new release"),
    ("live", "Live: shop serves release 1"),
]


async def test_a_first_deploy(rig: Rig) -> None:
    _share(rig)
    assert await rig.deploy() == "live"
    assert _calls(rig) == [
        "prepare R1",
        "start R1#0 127.0.0.1:20000",
        "ready? R1#0",
        f"route {SHOP} R1=100['127.0.0.1:20000']",
        "start R1#1 127.0.0.1:20001",
        "ready? R1#1",
        f"route {SHOP} R1=100['127.0.0.1:20000', '127.0.0.1:20001']",
        f"route {SHOP} R1=100['127.0.0.1:20000', '127.0.0.1:20001']",
    ]
    assert await _steps(rig, 1) == FIRST


async def test_recreate(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("recreate") == "live"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "unroute shop--acme",
        "stop R1",
        "start R2#0 127.0.0.1:20002",
        "start R2#1 127.0.0.1:20003",
        "ready? R2#0",
        "ready? R2#1",
        f"route {SHOP} R2=100['127.0.0.1:20002', '127.0.0.1:20003']",
        "stop R1",
    ]
    assert await _steps(rig, 2) == [
        ("queued", "Queued"),
        ("building", "Building: copying the source and running the build command"),
        ("starting", "Starting the new release (recreate)"),
        ("starting", "Stopping the old release (recreate)"),
        ("starting", "Starting instance 1 of 2"),
        ("starting", "Starting instance 2 of 2"),
        ("starting", "All traffic on the new release"),
        ("live", "Live: shop serves release 2"),
    ]
    assert (await _steps(rig, 1))[-1] == ("superseded", "Superseded")


async def test_rolling(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("rolling") == "live"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 127.0.0.1:20002",
        "ready? R2#0",
        f"route {SHOP} R2=50['127.0.0.1:20002'] R1=50['127.0.0.1:20001']",
        "stop R1#0",
        "start R2#1 127.0.0.1:20003",
        "ready? R2#1",
        f"route {SHOP} R2=67['127.0.0.1:20002', '127.0.0.1:20003'] R1=33['127.0.0.1:20001']",
        f"route {SHOP} R2=100['127.0.0.1:20002', '127.0.0.1:20003']",
        "stop R1",
        "stop R1",
    ]
    assert await _steps(rig, 2) == [
        ("queued", "Queued"),
        ("building", "Building: copying the source and running the build command"),
        ("starting", "Starting the new release (rolling)"),
        ("starting", "Starting instance 1 of 2"),
        ("starting", "Instance 1 of 2 serves traffic"),
        ("starting", "Starting instance 2 of 2"),
        ("starting", "Instance 2 of 2 serves traffic"),
        ("starting", "All traffic on the new release"),
        ("live", "Live: shop serves release 2"),
    ]


async def test_blue_green_and_a_warm_rollback(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("blue_green") == "live"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 127.0.0.1:20002",
        "start R2#1 127.0.0.1:20003",
        "ready? R2#0",
        "ready? R2#1",
        f"route {SHOP} R2=100['127.0.0.1:20002', '127.0.0.1:20003']",
    ]
    assert await _steps(rig, 2) == [
        ("queued", "Queued"),
        ("building", "Building: copying the source and running the build command"),
        ("starting", "Starting the new release (blue_green)"),
        ("starting", "Starting green instance 1 of 2"),
        ("starting", "Starting green instance 2 of 2"),
        ("starting", "Switched all traffic to the new release; the old one stays warm"),
        ("live", "Live: shop serves release 2"),
    ]
    assert (await _steps(rig, 1))[-1] == (
        "superseded",
        "Superseded (kept warm for an instant rollback)",
    )
    rig.runtime.calls.clear()
    record = await rig.deploys.rollback(await rig.app())
    assert rig.deploys.locks.held() == 0  # let go with the records' write, before the answer
    free = await rig.deploys.locks.try_take(record.app_id)
    assert free is not None
    await free.release()
    await rig.deploys.settle()
    assert _calls(rig) == [
        "running R1",
        f"route {SHOP} R1=100['127.0.0.1:20000', '127.0.0.1:20001']",
        "stop R2",
    ]
    assert (await _steps(rig, 1))[-1] == ("live", "Live again instantly (it was still warm)")
    assert (await _steps(rig, 2))[-1] == ("rolled_back", "Rolled back to 1")


async def test_a_warm_rollback_returns_before_its_listeners_hear_of_it_in_order(
    rig: Rig,
) -> None:
    await _live_first(rig)
    assert await rig.deploy("blue_green") == "live"
    heard: list[tuple[int | None, str]] = []
    go_on = asyncio.Event()

    async def slow_listener(change: Change) -> None:
        await go_on.wait()
        record = await rig.deploys.store.get(rig.app_id, change.deployment or 0)
        heard.append((change.deployment, record.state if record else ""))

    rig.feed.subscribe(slow_listener)

    restored = await rig.deploys.rollback(await rig.app())

    assert (restored.number, restored.state, heard) == (1, "live", [])
    go_on.set()
    await rig.deploys.settle()
    assert heard == [(2, "rolled_back"), (1, "live")]


async def test_a_deploy_goes_on_while_its_steps_are_heard_and_they_are_heard_in_order(
    rig: Rig,
) -> None:
    await _live_first(rig)
    heard: list[int | None] = []
    went_on: list[bool] = []
    second_started = asyncio.Event()
    start = rig.runtime.start

    async def starting(release: Release, index: int) -> Instance:
        instance = await start(release, index)
        if index == 1:
            second_started.set()
        return instance

    async def slow_listener(change: Change) -> None:
        if change.deployment == 2 and heard.count(2) == 1:  # the step after "Queued"
            async with asyncio.timeout(20):
                await second_started.wait()
            went_on.append(True)
        heard.append(change.deployment)

    rig.runtime.start = starting  # type: ignore[method-assign]
    rig.feed.subscribe(slow_listener)

    assert await rig.deploy("rolling") == "live"

    steps = await _steps(rig, 2)
    assert went_on == [True]  # the build and the starts ran while "Building" was being heard
    assert heard == [2] * len(steps) + [1]  # every step, in order, then the old one superseded


async def test_the_build_runs_while_its_building_step_is_written_and_the_steps_keep_order(
    rig: Rig,
) -> None:
    await _live_first(rig)
    prepared = asyncio.Event()
    waited: list[bool] = []
    update, prepare = rig.deploys.store.update, rig.runtime.prepare

    async def preparing(release: Release, *, rebuild: bool = False) -> None:
        await prepare(release, rebuild=rebuild)
        prepared.set()

    async def slow_building(app_id: int, number: int, **fields: Any) -> DeploymentRecord:
        if fields.get("state") == "building":  # written only once the build has begun
            async with asyncio.timeout(20):
                await prepared.wait()
            waited.append(True)
        return await update(app_id, number, **fields)

    rig.runtime.prepare = preparing  # type: ignore[method-assign]
    rig.deploys.store.update = slow_building  # type: ignore[method-assign]

    assert await rig.deploy("blue_green") == "live"

    assert waited == [True]
    assert [state for state, _ in await _steps(rig, 2)][:3] == ["queued", "building", "starting"]


async def test_a_cold_rollback(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("rolling") == "live"
    rig.runtime.calls.clear()
    said: list[tuple[str, int | None]] = []

    async def progress(message: str, traffic: int | None) -> None:
        said.append((message, traffic))

    await rig.deploys.rollback(await rig.app(), progress=progress)
    await rig.deploys.settle()
    assert _calls(rig) == [
        "running R1",
        "recover R1",
        "stop R1",
        "prepare R1",
        "start R1#0 127.0.0.1:20004",
        "ready? R1#0",
        "start R1#1 127.0.0.1:20005",
        "ready? R1#1",
        f"route {SHOP} R1=100['127.0.0.1:20004', '127.0.0.1:20005']",
        "stop R2",
    ]
    assert said == [
        ("Release 1 is cold: starting it", 0),
        ("Rolled back to release 1 after starting it again", 100),
    ]
    assert (await _steps(rig, 1))[-1] == ("live", "Live again after starting it again")
    assert (await _steps(rig, 2))[-1] == ("rolled_back", "Rolled back to 1")


async def test_a_canary_in_steps_10_50_100(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("canary") == "live"
    old = "['127.0.0.1:20000', '127.0.0.1:20001']"
    new = "['127.0.0.1:20002', '127.0.0.1:20003']"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 127.0.0.1:20002",
        "start R2#1 127.0.0.1:20003",
        "ready? R2#0",
        "ready? R2#1",
        f"route {SHOP} R2=10{new} R1=90{old}",
        f"mark {SHOP} R2",
        f"route {SHOP} R2=50{new} R1=50{old}",
        f"mark {SHOP} R2",
        f"route {SHOP} R2=100{new}",
        "stop R1",
    ]
    assert await _steps(rig, 2) == [
        ("queued", "Queued"),
        ("building", "Building: copying the source and running the build command"),
        ("starting", "Starting the new release (canary)"),
        ("starting", "Starting canary instance 1 of 2"),
        ("starting", "Starting canary instance 2 of 2"),
        ("canary", "Canary: analysing the new release on a share of traffic"),
        ("canary", "Canary at 10% for 0.1s"),
        ("canary", "Canary at 10% passed: 0 of 100 requests answered 5xx (0%; limit 5%)"),
        ("canary", "Canary at 50% for 0.1s"),
        ("canary", "Canary at 50% passed: 0 of 100 requests answered 5xx (0%; limit 5%)"),
        ("canary", "Canary promoted: all traffic on the new release"),
        ("live", "Live: shop serves release 2"),
    ]


async def test_a_rejected_canary_gives_traffic_back(rig: Rig) -> None:
    await _live_first(rig)
    rig.router.error_rates[f"{rig.app_id}-2"] = 0.5
    assert await rig.deploy("canary") == "rolled_back"
    old = "['127.0.0.1:20000', '127.0.0.1:20001']"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 127.0.0.1:20002",
        "start R2#1 127.0.0.1:20003",
        "ready? R2#0",
        "ready? R2#1",
        f"route {SHOP} R2=10['127.0.0.1:20002', '127.0.0.1:20003'] R1=90{old}",
        f"mark {SHOP} R2",
        f"route {SHOP} R1=100{old}",
        "stop R2",
    ]
    assert (await _steps(rig, 2))[-1] == (
        "rolled_back",
        "Rolled back automatically: the canary answered 50 of 100 requests with 5xx "
        "(50% > 5%) at 10%",
    )


async def test_a_failed_health_check_aborts_the_deploy(rig: Rig) -> None:
    await _live_first(rig)
    rig.runtime.health_plan = [True, False]  # instance 0 comes up, instance 1 does not
    assert await rig.deploy("rolling") == "failed"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 127.0.0.1:20002",
        "ready? R2#0",
        f"route {SHOP} R2=50['127.0.0.1:20002'] R1=50['127.0.0.1:20001']",
        "stop R1#0",
        "start R2#1 127.0.0.1:20003",
        "ready? R2#1",
        f"route {SHOP} R1=100['127.0.0.1:20000', '127.0.0.1:20001']",
        "stop R2",
    ]
    assert (await _steps(rig, 2))[-1] == (
        "failed",
        "Failed: instance 1 of the new release did not pass its health check (/): "
        "GET / answered 503",
    )


async def test_a_blue_green_whose_second_instance_fails_its_check_routes_none_of_it(
    rig: Rig,
) -> None:
    await _live_first(rig)
    rig.runtime.health_plan = [True, False]  # instance 0 comes up, instance 1 does not
    assert await rig.deploy("blue_green") == "failed"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 127.0.0.1:20002",
        "start R2#1 127.0.0.1:20003",
        "ready? R2#0",
        "ready? R2#1",
        f"route {SHOP} R1=100['127.0.0.1:20000', '127.0.0.1:20001']",
        "stop R2",
    ]
    assert (await _steps(rig, 2))[-1] == (
        "failed",
        "Failed: instance 1 of the new release did not pass its health check (/): "
        "GET / answered 503",
    )


async def test_a_failed_build_aborts_before_anything_starts(rig: Rig) -> None:
    await _live_first(rig)
    await rig.spec(build_command="false")
    assert await rig.deploy() == "failed"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        f"route {SHOP} R1=100['127.0.0.1:20000', '127.0.0.1:20001']",
        "stop R2",
    ]
    # The engine's build step strips a failed build's log tail and says where the log is
    # (platform/deploy/builds.py); the fake's failure says only its first half.
    assert (await _steps(rig, 2))[-1] == (
        "failed",
        "Failed: the build command exited with status 1; read the build log "
        "(tail_deploy_logs with kind 'build')",
    )


async def test_a_restart(rig: Rig) -> None:
    await _live_first(rig)
    said: list[tuple[str, int | None]] = []

    async def progress(message: str, traffic: int | None) -> None:
        said.append((message, traffic))

    await rig.deploys.restart(await rig.app(), progress)
    assert _calls(rig) == RESTART_OF_TWO
    assert said == [
        ("Restarted instance 1 of 2", 100),
        ("Restarted instance 2 of 2", 100),
    ]
    assert (await _steps(rig, 1))[-1] == (
        "live",
        "Restarted (rolling) with the app's current env",
    )


async def test_scale_up_then_down(rig: Rig) -> None:
    await _live_first(rig)
    await rig.deploys.scale(await rig.app(), 3, by=rig.alice)
    assert _calls(rig) == [
        "running R1",
        "start R1#2 127.0.0.1:20002",
        "ready? R1#2",
        f"route {SHOP} R1=100['127.0.0.1:20000', '127.0.0.1:20001', '127.0.0.1:20002']",
    ]
    rig.runtime.calls.clear()
    await rig.deploys.scale(await rig.app(), 1, by=rig.alice)
    assert _calls(rig) == [
        "running R1",
        f"route {SHOP} R1=100['127.0.0.1:20000']",
        "stop R1#1",
        "stop R1#2",
    ]
    assert [m for _, m in await _steps(rig, 1)][-2:] == [
        "Scaled to 3 instance(s)",
        "Scaled to 1 instance(s)",
    ]


async def test_stop_then_start(rig: Rig) -> None:
    await _live_first(rig)
    await rig.deploys.stop(await rig.app())
    assert _calls(rig) == [
        f"route {SHOP} stopped=0[]",
        "running R1",
        "stop R1",
    ]
    rig.runtime.calls.clear()
    await rig.deploys.start(await rig.app())
    assert _calls(rig) == [
        "running R1",
        "recover R1",
        "prepare R1",
        "start R1#0 127.0.0.1:20002",
        "ready? R1#0",
        "start R1#1 127.0.0.1:20003",
        "ready? R1#1",
        f"route {SHOP} R1=100['127.0.0.1:20002', '127.0.0.1:20003']",
    ]
    assert [m for _, m in await _steps(rig, 1)][-2:] == [
        "Stopped by its operator",
        "Started by its operator",
    ]


async def test_reconcile_recovers_then_starts_what_is_missing(rig: Rig) -> None:
    await _live_first(rig)
    release = f"{rig.app_id}-1"
    survivor = rig.runtime.running_.pop(release)[0]
    rig.runtime.adoptable[release] = {0: survivor}  # instance 0 outlived the server
    assert await rig.deploys.reconcile() == (0, 1)
    assert _calls(rig) == [
        "running R1",
        "recover R1",
        "prepare R1",
        "start R1#1 127.0.0.1:20002",
        "ready? R1#1",
        f"route {SHOP} R1=100['127.0.0.1:20000', '127.0.0.1:20002']",
    ]
    assert isinstance(survivor, Instance)


async def test_a_restart_of_a_release_recovered_after_a_server_restart(rig: Rig) -> None:
    """The plan's adoption risk, on the engine: what ``recover`` hands back is all a restart
    needs (no cache above the driver), and the restart runs in place, index by index."""
    await _live_first(rig)
    release = f"{rig.app_id}-1"
    rig.runtime.adoptable[release] = rig.runtime.running_.pop(release)  # both outlived it
    assert await rig.deploys.reconcile() == (0, 1)
    rig.runtime.calls.clear()
    await rig.deploys.restart(await rig.app())
    # the same as a restart of instances this process started
    assert _calls(rig) == RESTART_OF_TWO
