"""HealthService: an app's facts from the runtime port, the deployments and the ingress
counters; crashes become ``instance.updated`` changes; the catalogue the app series read."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.common.errors import NotFound
from appdeck.platform.changes import Change
from appdeck.platform.deploy.ports import DiskUsage, InstanceStatus
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes, shop_spec


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


async def _live_app(on: OnFakes, name: str = "shop", instances: int = 2) -> int:
    spec = {**shop_spec(on.source), "instances": instances}
    view = await on.platform.apps.register(on.alice, name, spec)
    done = await on.platform.deployments.deploy(on.alice, view.app.id, wait_s=None)
    assert done is not None
    assert done.record.state == "live"
    return view.app.id


async def test_an_app_never_deployed_is_not_deployed_with_no_instances(on: OnFakes) -> None:
    view = await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))
    health = await on.platform.health.status(on.alice, view.app.id)
    body = health.public()
    assert body["state"] == "not_deployed"
    assert body["live"] is None
    assert body["instances"] == {"up": 0, "desired": 0}
    assert body["traffic"]["requests"] == 0


async def test_a_live_app_reports_its_release_and_its_instances_up_against_desired(
    on: OnFakes,
) -> None:
    app_id = await _live_app(on)
    health = await on.platform.health.status(on.alice, app_id)
    assert health.state == "running"
    assert health.live is not None
    assert (health.live.number, health.live.strategy) == (1, "rolling")
    assert (health.up, health.desired) == (2, 2)
    assert [i.index for i in health.instances] == [0, 1]


async def test_an_instance_that_restarts_or_crash_loops_degrades_the_app(on: OnFakes) -> None:
    app_id = await _live_app(on)
    on.runtime.statuses[f"{app_id}-1"] = [
        InstanceStatus(0, "running", restarts=2, last_exit="status 3"),
        InstanceStatus(1, "restarting", restarts=1, last_exit="signal SIGKILL", oom_kills=1),
    ]
    health = await on.platform.health.status(on.alice, app_id)
    body = health.public()
    assert body["state"] == "degraded"
    assert body["instances"] == {"up": 1, "desired": 2}
    assert body["restarts"] == 3
    assert [i["last_exit"] for i in body["instance_details"]] == ["status 3", "signal SIGKILL"]
    assert body["instance_details"][1]["oom_kills"] == 1
    on.runtime.statuses[f"{app_id}-1"] = [InstanceStatus(0, "crash_loop", restarts=5)]
    assert (await on.platform.health.status(on.alice, app_id)).state == "crash_loop"


async def test_the_disk_and_the_last_minutes_of_traffic_are_in_the_facts(on: OnFakes) -> None:
    app_id = await _live_app(on)
    on.runtime.disks[app_id] = DiskUsage(5 * 1024 * 1024, 1024 * 1024 * 1024)
    counters = on.router.ingress.counters
    for status in (200, 200, 200, 503):
        counters.record("shop--acme", f"{app_id}-1", status, 0.02)
    counters.record("other--acme", "99-1", 500, 1.0)  # another app's: not counted here
    body = (await on.platform.health.status(on.alice, app_id)).public()
    assert body["disk"] == {"used_bytes": 5 * 1024 * 1024, "quota_bytes": 1024 * 1024 * 1024}
    traffic = body["traffic"]
    assert (traffic["requests"], traffic["errors_5xx"]) == (4, 1)
    assert traffic["mean_latency_ms"] == pytest.approx(20.0)


async def test_a_stranger_gets_not_found_for_the_health_of_an_app(on: OnFakes) -> None:
    app_id = await _live_app(on)
    with pytest.raises(NotFound):
        await on.platform.health.status(on.eve, app_id)


async def test_a_crash_the_runtime_tells_becomes_an_instance_change_of_the_apps_tenant(
    on: OnFakes,
) -> None:
    app_id = await _live_app(on)
    seen: list[Change] = []

    async def listen(change: Change) -> None:
        seen.append(change)

    on.platform.feed.subscribe(listen)
    on.runtime.crash(app_id, f"{app_id}-1", 0, "oom_killed")
    on.runtime.crash(app_id, f"{app_id}-1", 0, "restarted")
    await on.platform.health.settle()
    assert [(c.kind, c.tenant_id, c.app_id, c.deployment) for c in seen] == [
        ("instance.updated", "acme", app_id, 1),
        ("instance.updated", "acme", app_id, 1),
    ]
    counts = on.platform.health.events[app_id]
    assert (counts.restarts, counts.oom_kills, counts.crash_loops) == (1, 1, 0)


async def test_the_catalogue_lists_live_apps_and_is_stale_after_a_deploy(on: OnFakes) -> None:
    health = on.platform.health
    first = await _live_app(on, "shop", instances=2)
    await health.refresh()
    assert [(e.app_id, e.route, e.release_id, e.desired) for e in health.catalogue] == [
        (first, "shop--acme", f"{first}-1", 2)
    ]
    second = await _live_app(on, "blog", instances=1)
    await health.tick()  # the deploy's change made it stale: read again
    assert [e.app_id for e in health.catalogue] == [first, second]


async def test_briefs_read_every_apps_live_release_at_once(on: OnFakes) -> None:
    live = await _live_app(on, "shop", instances=1)
    idle = (await on.platform.apps.register(on.alice, "blog", shop_spec(on.source))).app.id
    apps = [v.app for v in await on.platform.apps.list_apps(on.alice, offset=0, limit=10)]
    briefs = await on.platform.health.briefs(apps)
    assert briefs[live].brief() == {"state": "running", "up": 1, "desired": 1, "restarts": 0}
    assert briefs[idle].brief()["state"] == "not_deployed"
