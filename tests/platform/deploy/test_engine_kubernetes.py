"""The deploy engine on a driver with the Kubernetes column of capabilities (docs/runtime-seam.md
§2.2: no ``in_place_restart``, no ``indexed_instances``, no ``host_processes``), pinned call by
call as test_engine_sequences.py pins the local column (which must not change).

What the engine does there: a restart is a rollout of the live release as a new one (a new
number, the app's env now, by the app's strategy); a rolling deploy retires the old release as
a whole once the new one has all traffic, not index by index; a release nobody here runs is not
"recovered" from the host (the cluster's pods are no replica's); scaling starts or stops
instances by index, which the Kubernetes driver turns into the Deployment's ``replicas``. Every
instance of a release has its Service's address as upstream, listed once in a route.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from appdeck.storage import Storage

from .fakes import KUBERNETES, FakeDriver, FakeRouter
from .test_engine import SHOP, Rig, make_rig


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> Rig:
    runtime = FakeDriver(capabilities_=KUBERNETES)
    router = FakeRouter(gateway=True)
    router.calls = runtime.calls  # one sequence of both
    return await make_rig(storage, tmp_path, runtime, router)


def _calls(rig: Rig) -> list[str]:
    """The calls, releases as ``R<number>``, their Services as ``svc<number>``."""
    prefix = re.compile(rf"\b{rig.app_id}-(\d+)")
    service = re.compile(rf"r{rig.app_id}-(\d+)\.appdeck-acme\.svc:80")
    return [prefix.sub(r"R\1", service.sub(r"svc\1", call)) for call in rig.runtime.calls]


async def _steps(rig: Rig, number: int) -> list[tuple[str, str]]:
    record = await rig.deploys.store.get(rig.app_id, number)
    assert record is not None
    return [(s["state"], s["message"]) for s in record.steps]


async def _live_first(rig: Rig, strategy: str | None = None) -> None:
    assert await rig.deploy(strategy) == "live"
    rig.runtime.calls.clear()


async def test_a_first_deploy_routes_the_service_once(rig: Rig) -> None:
    assert await rig.deploy() == "live"
    assert _calls(rig) == [
        "prepare R1",
        "start R1#0 svc1",
        "ready? R1#0",
        f"route {SHOP} R1=100['svc1']",
        "start R1#1 svc1",
        "ready? R1#1",
        f"route {SHOP} R1=100['svc1']",
        f"route {SHOP} R1=100['svc1']",
    ]


async def test_rolling_retires_the_old_release_as_a_whole(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("rolling") == "live"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 svc2",
        "ready? R2#0",
        f"route {SHOP} R2=50['svc2'] R1=50['svc1']",
        "start R2#1 svc2",
        "ready? R2#1",
        f"route {SHOP} R2=67['svc2'] R1=33['svc1']",
        f"route {SHOP} R2=100['svc2']",
        "stop R1",  # the whole old release, once (no "stop R1#0" between the starts)
        "stop R1",  # the engine's, once superseded (as on the local column)
    ]
    assert await rig.states() == {1: "superseded", 2: "live"}


async def test_recreate(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("recreate") == "live"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        f"unroute {SHOP}",
        "stop R1",
        "start R2#0 svc2",
        "start R2#1 svc2",
        "ready? R2#0",
        "ready? R2#1",
        f"route {SHOP} R2=100['svc2']",
        "stop R1",
    ]


async def test_blue_green_then_a_warm_rollback(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("blue_green") == "live"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 svc2",
        "start R2#1 svc2",
        "ready? R2#0",
        "ready? R2#1",
        f"route {SHOP} R2=100['svc2']",
    ]
    rig.runtime.calls.clear()
    await rig.deploys.rollback(await rig.app())
    assert _calls(rig)[:2] == ["running R1", f"route {SHOP} R1=100['svc1']"]
    assert await rig.states() == {1: "live", 2: "rolled_back"}


async def test_a_canary_in_steps_10_50_100(rig: Rig) -> None:
    await _live_first(rig)
    assert await rig.deploy("canary") == "live"
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 svc2",
        "start R2#1 svc2",
        "ready? R2#0",
        "ready? R2#1",
        f"route {SHOP} R2=10['svc2'] R1=90['svc1']",
        f"mark {SHOP} R2",
        f"route {SHOP} R2=50['svc2'] R1=50['svc1']",
        f"mark {SHOP} R2",
        f"route {SHOP} R2=100['svc2']",
        "stop R1",
    ]


async def test_a_restart_is_a_rollout_of_the_same_release_as_a_new_one(rig: Rig) -> None:
    await _live_first(rig)
    await rig.env.set_vars(rig.alice, rig.app_id, {"GREETING": "hi"}, secret=False)
    said: list[tuple[str, int | None]] = []

    async def progress(message: str, traffic: int | None) -> None:
        said.append((message, traffic))

    record = await rig.deploys.restart(await rig.app(), progress, by=rig.alice.user)
    assert (record.number, record.state) == (2, "live")
    assert await rig.states() == {1: "superseded", 2: "live"}
    assert _calls(rig) == [
        "running R1",
        "prepare R2",
        "start R2#0 svc2",
        "ready? R2#0",
        f"route {SHOP} R2=50['svc2'] R1=50['svc1']",
        "start R2#1 svc2",
        "ready? R2#1",
        f"route {SHOP} R2=67['svc2'] R1=33['svc1']",
        f"route {SHOP} R2=100['svc2']",
        "stop R1",  # the whole old release, once (no "stop R1#0" between the starts)
        "stop R1",  # the engine's, once superseded (as on the local column)
    ]
    restarted = (
        "Restart of release 1 as release 2 (rolling), with the app's current env: this "
        "runtime cannot restart an instance in place"
    )
    assert said[0] == (restarted, None)
    assert (await _steps(rig, 2))[:2] == [("queued", "Queued"), ("queued", restarted)]
    live = await rig.deploys.live(rig.app_id)
    assert live is not None
    app = await rig.apps.store.get(rig.app_id)
    assert app is not None
    release = rig.deploys.release_of(app, live)
    assert release.env["GREETING"] == "hi"  # the fresh env, frozen in the new release


async def test_scale_up_then_down_by_index(rig: Rig) -> None:
    await _live_first(rig)
    await rig.deploys.scale(await rig.app(), 3, by=rig.alice)
    assert _calls(rig) == [
        "running R1",
        "start R1#2 svc1",
        "ready? R1#2",
        f"route {SHOP} R1=100['svc1']",
    ]
    rig.runtime.calls.clear()
    await rig.deploys.scale(await rig.app(), 1, by=rig.alice)
    assert _calls(rig) == [
        "running R1",
        f"route {SHOP} R1=100['svc1']",
        "stop R1#1",
        "stop R1#2",
    ]


async def test_a_release_nobody_runs_here_is_not_recovered_from_the_host(rig: Rig) -> None:
    await _live_first(rig)
    await rig.runtime.stop(f"{rig.app_id}-1")
    rig.runtime.calls.clear()
    app = await rig.apps.store.get(rig.app_id)
    assert app is not None
    assert await rig.deploys.live_backends(app) == []
    assert _calls(rig) == ["running R1"]  # no "recover R1"
