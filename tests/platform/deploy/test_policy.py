"""The deploy policy: the refusals of a new deployment, in the order a caller meets them (the
first rule that fails is the error on the wire), the rules of a release going live, and the
strategies. Real database; fakes for the runtime."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from appdeck.common.errors import AppDeckError, FailedPrecondition
from appdeck.model import specs
from appdeck.platform.deploy import policy, states
from appdeck.platform.deploy.core import EngineCore
from appdeck.storage import Storage
from appdeck.storage.apps import AppRecord

from .test_engine import Rig, make_rig


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> Rig:
    return await make_rig(storage, tmp_path)


async def _refusal(
    rig: Rig, app: AppRecord, strategy: str | None, commit: str | None
) -> tuple[str, str, str | None]:
    with pytest.raises(AppDeckError) as refused:
        await rig.deploys.create(app, rig.alice.user, strategy, commit)
    return type(refused.value).__name__, refused.value.message, refused.value.hint


async def test_a_deploy_failing_every_rule_is_refused_by_each_in_turn_as_each_is_fixed(
    rig: Rig, tmp_path: Path
) -> None:
    async def gate(app_id: int, commit: str | None) -> None:
        raise FailedPrecondition("not green", hint="run CI")

    good = await rig.app()
    first = await rig.deploys.create(good, rig.alice.user, None)  # #1 queued: its lease held
    rig.deploys.gate = gate  # CI requires green from now on
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    spec = {"source_path": str(outside)}  # no run_command; outside the source roots
    app = dataclasses.replace(good, stopped=True, name="x" * 60, spec=spec)
    strategy: str | None = "yolo"
    commit: str | None = "abc123"
    said = []
    said.append(await _refusal(rig, app, strategy, commit))
    app = dataclasses.replace(app, stopped=False)
    said.append(await _refusal(rig, app, strategy, commit))
    strategy = None
    said.append(await _refusal(rig, app, strategy, commit))
    commit = None
    said.append(await _refusal(rig, app, strategy, commit))
    app = dataclasses.replace(app, spec={**spec, "run_command": "python app.py"})
    said.append(await _refusal(rig, app, strategy, commit))
    await rig.deploys.run(*first)
    said.append(await _refusal(rig, app, strategy, commit))
    app = dataclasses.replace(app, name=good.name)
    source = await _refusal(rig, app, strategy, commit)
    app = dataclasses.replace(app, spec=good.spec)
    said.append(await _refusal(rig, app, strategy, commit))
    assert said == [
        (
            "FailedPrecondition",
            "the app is stopped: a deploy would start it",
            "restart_app with action start first",
        ),
        (
            "InvalidArgument",
            "unknown strategy 'yolo'",
            "one of recreate, rolling, blue_green, canary",
        ),
        (
            "FailedPrecondition",
            "a commit is deployed from a connected repository; this app has none",
            "connect_repo first",
        ),
        ("FailedPrecondition", "the app has no run_command", "set_app_spec with spec.run_command"),
        (
            "DeployBusy",
            "deployment 1 of this app is still queued",
            "wait for it (list_deployments) before deploying again",
        ),
        (
            "FailedPrecondition",
            f"app name {'x' * 60!r} is too long for tenant 'acme': its hostname "
            f"{'x' * 60}--acme.localhost must have a first label of at most 63 characters, so "
            "app names in this tenant have at most 57",
            "rename the app (manage_app update)",
        ),
        ("FailedPrecondition", "not green", "run CI"),
    ]
    assert source[0] == "FailedPrecondition"
    assert source[1].startswith("the app's source no longer passes the source check: ")
    assert await rig.states() == {1: "live"}  # none of them recorded a deployment


async def test_an_app_without_a_source_path_is_refused_before_its_run_command_is_looked_at(
    rig: Rig,
) -> None:
    app = dataclasses.replace(await rig.app(), spec={})
    assert await _refusal(rig, app, None, None) == (
        "FailedPrecondition",
        "the app has no source_path",
        "set_app_spec with spec.source_path, or connect_repo, first",
    )


def test_every_strategy_of_the_spec_has_a_policy_and_only_blue_green_keeps_the_old_one_warm() -> (
    None
):
    assert list(policy.STRATEGIES) == list(specs.STRATEGIES)
    warm = [name for name, s in policy.STRATEGIES.items() if s.keeps_old_warm]
    assert warm == ["blue_green"]


def test_the_core_policy_gives_a_new_deployment_its_refusals_and_a_release_going_live_the_rest() -> (
    None
):
    names = [type(rule).__name__ for rule in policy.CorePolicy.rules_for(None, states.QUEUED)]
    assert names == [
        "RefuseStopped",
        "KnownStrategy",
        "NeedsSource",
        "NeedsRunCommand",
        "ReclaimOrphan",
        "Routable",
        "ResolveSource",
        "RequireGreen",
    ]
    for left in (states.STARTING, states.CANARY):
        live = policy.CorePolicy.rules_for(left, states.LIVE)
        assert [type(rule).__name__ for rule in live] == ["SupersedeOld", "ClearNeedsRestart"]
    assert policy.CorePolicy.rules_for(states.LIVE, states.SUPERSEDED) == []


class NoFridays(policy.DeployRule):
    async def before(self, ctx: policy.DeployContext, engine: EngineCore) -> None:
        raise FailedPrecondition("no deploys today", hint="wait for monday")


class Cautious(policy.CorePolicy):
    @staticmethod
    def priority() -> list[type[policy.DeployRule]]:
        return [*policy.CorePolicy.priority(), NoFridays]


async def test_a_policy_given_to_the_engine_refuses_with_its_own_rule_after_the_core_ones(
    rig: Rig,
) -> None:
    rig.deploys.policy = Cautious
    app = await rig.app()
    assert await _refusal(rig, app, None, None) == (
        "FailedPrecondition",
        "no deploys today",
        "wait for monday",
    )
    stopped = dataclasses.replace(app, stopped=True)
    assert (await _refusal(rig, stopped, None, None))[1] == (
        "the app is stopped: a deploy would start it"
    )
    assert await rig.states() == {}
