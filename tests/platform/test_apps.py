"""AppService: the rules of apps, as any adapter (tool, CLI, web page) meets them."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.common.errors import (
    ConfirmationRequired,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes, shop_spec


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


async def test_the_registrant_owns_the_app_and_the_spec_is_completed(on: OnFakes) -> None:
    view = await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))
    assert view.role == "owner"
    assert view.url.startswith("http://shop--acme.localhost")
    assert view.app.spec["health_check"] == {"path": "/", "timeout_s": 5}  # a default


async def test_names_are_unique_per_tenant_and_must_be_slugs(on: OnFakes) -> None:
    apps = on.platform.apps
    await apps.register(on.alice, "shop")
    with pytest.raises(Conflict):
        await apps.register(on.alice, "shop")
    with pytest.raises(InvalidArgument):
        await apps.register(on.alice, "Not A Slug")
    assert (await apps.register(on.eve, "shop")).url.startswith("http://shop--globex.")


async def test_another_tenants_app_is_not_found_and_a_stranger_gets_not_found(
    on: OnFakes,
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    for who in (on.eve, on.bob):
        with pytest.raises(NotFound):
            await on.platform.apps.get(who, app_id)


async def test_deleting_asks_for_a_confirmation_after_checking_the_caller(on: OnFakes) -> None:
    apps = on.platform.apps
    app_id = (await apps.register(on.alice, "shop")).app.id
    await apps.grant(on.alice, app_id, "bob", "developer")
    with pytest.raises(PermissionDenied):  # not asked: a developer may not delete at all
        await apps.delete(on.bob, app_id, confirmed=False)
    with pytest.raises(ConfirmationRequired) as asked:
        await apps.delete(on.alice, app_id, confirmed=False)
    assert "shop" in asked.value.question
    assert asked.value.code == "failed_precondition"
    await apps.delete(on.alice, app_id, confirmed=True)
    with pytest.raises(NotFound):
        await apps.get(on.alice, app_id)


async def test_an_app_keeps_one_owner(on: OnFakes) -> None:
    apps = on.platform.apps
    app_id = (await apps.register(on.bob, "mine")).app.id
    with pytest.raises(FailedPrecondition):
        await apps.revoke(on.bob, app_id, "bob")


async def test_a_spec_change_is_a_merge_patch_with_a_diff_and_a_dry_run(on: OnFakes) -> None:
    apps = on.platform.apps
    app_id = (await apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    view, changes = await apps.set_spec(on.alice, app_id, {"instances": 3}, dry_run=True)
    assert changes == [{"path": "/instances", "from": 1, "to": 3}]
    assert (await apps.get(on.alice, app_id)).app.spec["instances"] == 1  # dry run
    view, _ = await apps.set_spec(on.alice, app_id, {"instances": 3, "canary": None})
    assert view.app.spec["instances"] == 3
    assert view.app.spec["canary"]["steps"] == [10, 50, 100]  # null reset it to the default
    assert view.app.spec_version == 2


async def test_a_spec_source_outside_the_tenants_roots_is_refused(on: OnFakes) -> None:
    with pytest.raises(InvalidArgument):
        await on.platform.apps.register(on.alice, "shop", {"source_path": "/etc"})
