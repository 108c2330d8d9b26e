"""Deployments: the wait policy and the rollback-confirmation rule, as every adapter meets them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from appdeck.common.errors import AppDeckError, ConfirmationRequired, NotFound
from appdeck.common.identity import Principal
from appdeck.platform.deploy import policy
from appdeck.platform.deploy.deployments import Deployments
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes, shop_spec


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


def test_the_wait_is_bounded() -> None:
    assert policy.wait_seconds(None) == policy.DEFAULT_WAIT_S
    assert policy.wait_seconds(600) == policy.MAX_WAIT_S
    assert policy.wait_seconds(-1) == 0


async def test_a_deploy_with_no_wait_answers_at_once_and_goes_on(on: OnFakes) -> None:
    deployments = on.platform.deployments
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    first = await deployments.deploy(on.alice, app_id, wait_s=0)
    assert first.record.number == 1
    await deployments.settle()
    after = await deployments.get(on.alice, app_id, 1)
    assert after.done
    assert after.public()["url"] == first.url


async def test_rolling_back_past_the_previous_release_needs_a_confirmation(on: OnFakes) -> None:
    deployments = on.platform.deployments
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    for _ in range(3):
        await deployments.deploy(on.alice, app_id, wait_s=None)
    with pytest.raises(ConfirmationRequired) as asked:
        await deployments.rollback(on.alice, app_id, 1)
    assert "#1" in asked.value.question
    restored = await deployments.rollback(on.alice, app_id, 1, confirmed=True)
    assert restored.record.number == 1
    assert restored.live


async def test_a_rollback_to_the_previous_release_needs_no_confirmation(on: OnFakes) -> None:
    deployments = on.platform.deployments
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    for _ in range(2):
        await deployments.deploy(on.alice, app_id, wait_s=None)
    assert (await deployments.rollback(on.alice, app_id)).record.number == 1


async def test_the_confirmation_is_asked_only_of_who_may_roll_back(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    with pytest.raises(NotFound):
        await on.platform.deployments.rollback(on.eve, app_id, 7)


async def _refusal(call: Awaitable[object]) -> tuple[str, str, str | None]:
    """The error a write raised: its kind, its message and its hint."""
    with pytest.raises(AppDeckError) as refused:
        await call
    return type(refused.value).__name__, refused.value.message, refused.value.hint


def _writes(
    deployments: Deployments, who: Principal, app_id: int
) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every write of the façade, as ``who`` on ``app_id``."""
    return {
        "deploy": lambda: deployments.deploy(who, app_id, wait_s=None),
        "rollback": lambda: deployments.rollback(who, app_id),
        "restart": lambda: deployments.restart(who, app_id),
        "stop": lambda: deployments.stop(who, app_id),
        "start": lambda: deployments.start(who, app_id),
        "scale": lambda: deployments.scale(who, app_id, 2),
        "cancel": lambda: deployments.cancel(who, app_id),
    }


async def test_the_one_role_check_refuses_a_viewer_another_tenant_and_a_stopped_app_as_before(
    on: OnFakes,
) -> None:
    """The façade checks the role once and hands the engine the app (runtime-seam step 6):
    the kinds and texts a caller gets are the ones the engine's own checks gave."""
    deployments = on.platform.deployments
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    for _ in range(2):
        await deployments.deploy(on.alice, app_id, wait_s=None)
    await on.platform.apps.grant(on.alice, app_id, "bob", "viewer")

    denied = (
        "PermissionDenied",
        f"your role on app {app_id} is viewer; deploy.write needs developer or higher",
        "ask an owner or admin of the app to grant you a higher role",
    )
    unknown = ("NotFound", f"no app {app_id}", "list_my_apps shows the apps you can use")
    for name, write in _writes(deployments, on.bob, app_id).items():
        assert await _refusal(write()) == denied, name
    for name, write in _writes(deployments, on.eve, app_id).items():
        assert await _refusal(write()) == unknown, name

    await deployments.stop(on.alice, app_id)
    hint = "restart_app with action start first"
    stopped = _writes(deployments, on.alice, app_id)
    for name, what in (
        ("deploy", "a deploy"),
        ("rollback", "a rollback"),
        ("restart", "a restart"),
    ):
        refused = await _refusal(stopped[name]())
        assert refused == ("FailedPrecondition", f"the app is stopped: {what} would start it", hint)
    assert (await deployments.start(on.alice, app_id)).stopped is False
