"""Restart (issue 20, item 7): a restart that fails cleans up after itself, and the next
restart works. Real database; in-memory runtime and router (see fakes.py)."""

from __future__ import annotations

import pytest

from appdeck.common.errors import FailedPrecondition

from .test_engine import SHOP, Rig, rig  # noqa: F401 - the fixture

RELEASE = "1-1"


async def _indices(r: Rig, release: str) -> list[int]:
    return [i.index for i in await r.runtime.running(release)]


async def test_a_restart_whose_spare_fails_leaves_no_spare_and_the_next_restart_works(
    rig: Rig,
) -> None:
    assert await rig.deploy() == "live"
    release = f"{rig.app_id}-1"
    rig.runtime.health_plan = [False]  # the spare instance never gets healthy
    with pytest.raises(FailedPrecondition) as failed:
        await rig.ops.restart(rig.alice, rig.app_id)
    assert "restart" in failed.value.message and failed.value.hint
    assert await _indices(rig, release) == [0, 1]  # no spare left behind
    assert len(rig.router.table[SHOP][0].upstreams) == 2  # both still serve
    await rig.ops.restart(rig.alice, rig.app_id)  # and the next restart works
    assert await _indices(rig, release) == [0, 1]
    assert len(rig.router.table[SHOP][0].upstreams) == 2


async def test_a_restart_failing_midway_stops_the_failed_instance_and_the_spare(
    rig: Rig,
) -> None:
    assert await rig.deploy() == "live"
    release = f"{rig.app_id}-1"
    rig.runtime.health_plan = [True, False]  # the spare comes up, instance 0 does not
    with pytest.raises(FailedPrecondition):
        await rig.ops.restart(rig.alice, rig.app_id)
    running = await rig.runtime.running(release)
    assert [i.index for i in running] == [1]  # the failed one and the spare are gone
    assert rig.router.table[SHOP][0].upstreams == (running[0].upstream,)
    await rig.ops.restart(rig.alice, rig.app_id)
    assert await _indices(rig, release) == [0, 1]
    assert len(rig.router.table[SHOP][0].upstreams) == 2


async def test_a_restart_of_a_one_instance_app_failing_keeps_it_answering(rig: Rig) -> None:
    await rig.spec(instances=1)
    assert await rig.deploy() == "live"
    release = f"{rig.app_id}-1"
    rig.runtime.health_plan = [True, False]  # the spare comes up, the restarted one does not
    with pytest.raises(FailedPrecondition) as failed:
        await rig.ops.restart(rig.alice, rig.app_id)
    assert "spare" in failed.value.message
    running = await rig.runtime.running(release)
    assert rig.router.table[SHOP][0].upstreams == tuple(i.upstream for i in running)
    assert len(running) == 1  # the spare alone serves: no downtime
    await rig.ops.restart(rig.alice, rig.app_id)  # the next restart puts instance 0 back
    assert await _indices(rig, release) == [0]
