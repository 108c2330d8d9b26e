"""A push's deploy waits for the deploy under way, and gives up for a newer push."""

from __future__ import annotations

import pytest

from appdeck.common.errors import FailedPrecondition
from appdeck.platform.deploy.policy import DeployBusy
from appdeck.platform.deploy.queued import when_free


class Attempts:
    def __init__(self, *outcomes: Exception | str) -> None:
        self.outcomes = list(outcomes)
        self.tried = 0
        self.slept = 0.0

    async def attempt(self) -> str:
        self.tried += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def sleep(self, seconds: float) -> None:
        self.slept += seconds


async def _wanted() -> bool:
    return True


async def _superseded() -> bool:
    return False


async def test_a_busy_app_is_tried_again_until_the_deploy_goes_through() -> None:
    busy = DeployBusy("deployment 2 of this app is still building")
    tries = Attempts(busy, busy, "deployed")
    assert await when_free(tries.attempt, _wanted, every_s=2, sleep=tries.sleep) == "deployed"
    assert (tries.tried, tries.slept) == (3, 4)


async def test_a_newer_push_while_waiting_means_this_commit_is_not_deployed() -> None:
    tries = Attempts(DeployBusy("busy"), "deployed")
    assert await when_free(tries.attempt, _superseded, sleep=tries.sleep) is None
    assert tries.tried == 1


async def test_any_other_refusal_is_said_at_once() -> None:
    tries = Attempts(FailedPrecondition("the app has no run_command"))
    with pytest.raises(FailedPrecondition):
        await when_free(tries.attempt, _wanted, sleep=tries.sleep)
    assert tries.slept == 0


async def test_the_wait_is_bounded() -> None:
    tries = Attempts(*[DeployBusy("busy")] * 6)
    with pytest.raises(DeployBusy):
        await when_free(tries.attempt, _wanted, every_s=2, within_s=10, sleep=tries.sleep)
    assert (tries.tried, tries.slept) == (6, 10)
