"""The deploy series (``appdeck.observability.deploys``) as a real DeployEngine drives them:
a good deploy, a failed build, canaries rejected by error rate and by a crash loop, a
rollback and a restart. The registry is the process's: every check is a difference."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from appdeck.observability.deploys import PAIRS, DeployMetrics
from appdeck.platform.deploy.watch import OUTCOMES, PHASES, REASONS
from appdeck.storage import Storage
from tests.platform.deploy.fakes import FakeDriver

from .rig import Rig, watched_rig

Sample = tuple[str, tuple[tuple[str, str], ...]]


def snapshot() -> dict[Sample, float]:
    """Every sample of the deploy families now."""
    found: dict[Sample, float] = {}
    for family in REGISTRY.collect():
        if family.name.startswith(("appdeck_deploy", "appdeck_canary")):
            for s in family.samples:
                found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


class Deltas:
    def __init__(self) -> None:
        self.before = snapshot()

    def __call__(self, name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return snapshot().get(key, 0.0) - self.before.get(key, 0.0)


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> Rig:
    return await watched_rig(storage, tmp_path, DeployMetrics())


def test_every_series_exists_at_zero_from_the_start() -> None:
    for kind, strategy in PAIRS:
        labels = {"kind": kind, "strategy": strategy}
        assert REGISTRY.get_sample_value("appdeck_deploys_started_total", labels) is not None
        for outcome in OUTCOMES:
            both = {**labels, "outcome": outcome}
            assert REGISTRY.get_sample_value("appdeck_deploys_finished_total", both) is not None
            assert REGISTRY.get_sample_value("appdeck_deploy_seconds_count", both) is not None
    for phase in PHASES:
        assert (
            REGISTRY.get_sample_value("appdeck_deploy_phase_seconds_count", {"phase": phase})
            is not None
        )
    for reason in REASONS:
        labels = {"reason": reason}
        assert REGISTRY.get_sample_value("appdeck_canary_rollbacks_total", labels) is not None


async def test_a_good_deploy_counts_one_start_one_live_end_and_its_phases(rig: Rig) -> None:
    delta = Deltas()
    assert await rig.deploy("rolling") == "live"
    assert delta("appdeck_deploys_started_total", kind="deploy", strategy="rolling") == 1
    live = {"kind": "deploy", "strategy": "rolling", "outcome": "live"}
    assert delta("appdeck_deploys_finished_total", **live) == 1
    assert delta("appdeck_deploy_seconds_count", **live) == 1
    for phase, times in {"lease": 1, "build": 1, "start": 2, "health": 2}.items():
        assert delta("appdeck_deploy_phase_seconds_count", phase=phase) == times, phase
    assert delta("appdeck_deploy_phase_seconds_count", phase="shift") >= 2  # each instance, all
    assert delta("appdeck_deploy_phase_seconds_count", phase="analysis") == 0


async def test_a_failed_build_ends_failed_and_starts_nothing(rig: Rig) -> None:
    await rig.spec(build_command="false")
    delta = Deltas()
    assert await rig.deploy("blue_green") == "failed"
    failed = {"kind": "deploy", "strategy": "blue_green", "outcome": "failed"}
    assert delta("appdeck_deploys_finished_total", **failed) == 1
    live = {"kind": "deploy", "strategy": "blue_green", "outcome": "live"}
    assert delta("appdeck_deploys_finished_total", **live) == 0
    assert delta("appdeck_deploy_phase_seconds_count", phase="build") == 1
    assert delta("appdeck_deploy_phase_seconds_count", phase="start") == 0


async def test_a_canary_rejected_by_its_error_rate_is_a_rollback_with_that_reason(
    rig: Rig,
) -> None:
    assert await rig.deploy() == "live"
    rig.router.error_rates[f"{rig.app_id}-2"] = 0.5
    delta = Deltas()
    assert await rig.deploy("canary") == "rolled_back"
    assert delta("appdeck_deploys_started_total", kind="deploy", strategy="canary") == 1
    back = {"kind": "deploy", "strategy": "canary", "outcome": "rolled_back"}
    assert delta("appdeck_deploys_finished_total", **back) == 1
    assert delta("appdeck_canary_rollbacks_total", reason="error_rate") == 1
    assert delta("appdeck_canary_rollbacks_total", reason="crash_loop") == 0
    assert delta("appdeck_deploy_phase_seconds_count", phase="analysis") == 1  # the first window


class CrashingCanary(FakeDriver):
    async def gave_up(self, release_id: str) -> bool:
        return release_id.endswith("-2")


async def test_a_canary_that_crash_loops_is_a_rollback_for_crash_loop(
    storage: Storage, tmp_path: Path
) -> None:
    rig = await watched_rig(storage, tmp_path, DeployMetrics(), CrashingCanary())
    assert await rig.deploy() == "live"
    delta = Deltas()
    assert await rig.deploy("canary") == "rolled_back"
    assert delta("appdeck_canary_rollbacks_total", reason="crash_loop") == 1
    assert delta("appdeck_canary_rollbacks_total", reason="error_rate") == 0


async def test_a_rollback_and_a_restart_are_counted_as_their_own_kinds(rig: Rig) -> None:
    assert await rig.deploy() == "live"
    assert await rig.deploy("blue_green") == "live"
    delta = Deltas()
    await rig.deploys.rollback(await rig.app())
    rollback = {"kind": "rollback", "strategy": "none"}
    assert delta("appdeck_deploys_started_total", **rollback) == 1
    assert delta("appdeck_deploys_finished_total", **rollback, outcome="live") == 1
    assert delta("appdeck_deploy_phase_seconds_count", phase="lease") == 1
    assert delta("appdeck_deploy_phase_seconds_count", phase="shift") == 1  # warm: one switch
    assert delta("appdeck_deploy_phase_seconds_count", phase="start") == 0

    delta = Deltas()
    await rig.deploys.restart(await rig.app())
    restart = {"kind": "restart", "strategy": "rolling"}
    assert delta("appdeck_deploys_started_total", **restart) == 1
    assert delta("appdeck_deploys_finished_total", **restart, outcome="live") == 1
    assert delta("appdeck_deploy_phase_seconds_count", phase="start") == 3  # a spare, then 2
    assert delta("appdeck_deploys_started_total", kind="deploy", strategy="rolling") == 0


async def test_a_restart_that_fails_is_counted_failed(rig: Rig) -> None:
    assert await rig.deploy() == "live"
    rig.runtime.health_plan[:] = [False]  # the spare never becomes healthy
    delta = Deltas()
    with pytest.raises(Exception, match="restart failed"):
        await rig.deploys.restart(await rig.app())
    restart = {"kind": "restart", "strategy": "rolling"}
    assert delta("appdeck_deploys_finished_total", **restart, outcome="failed") == 1
    assert delta("appdeck_deploys_finished_total", **restart, outcome="live") == 0


async def test_a_refused_deploy_is_no_run(rig: Rig) -> None:
    delta = Deltas()
    with pytest.raises(Exception, match="unknown strategy"):
        await rig.deploys.create(await rig.app(), rig.alice.user, "yolo")
    assert all(
        delta("appdeck_deploys_started_total", kind=kind, strategy=strategy) == 0
        for kind, strategy in PAIRS
    )
