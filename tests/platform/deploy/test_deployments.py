"""Deployments: the wait policy and the rollback-confirmation rule, as every adapter meets them."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.common.errors import ConfirmationRequired, NotFound
from appdeck.platform.deploy import policy
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
