"""AppService: who may change whom (never a role at or above your own, always an owner left),
what losing access announces, and the app quota under concurrent registrations."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from appdeck.common.errors import FailedPrecondition, PermissionDenied, QuotaExceeded
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change
from appdeck.platform.quotas import Limits
from appdeck.storage import Storage
from appdeck.storage.identity import IdentityStore
from tests.platform.on_fakes import OnFakes, platform_on_fakes


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


async def _user(on: OnFakes, name: str) -> Principal:
    made = await on.admin.create_user("acme", name, None)
    return Principal("acme", made.id, kind="oauth")


async def test_an_app_admin_can_neither_demote_nor_remove_the_owner(on: OnFakes) -> None:
    apps = on.platform.apps
    carol = await _user(on, "carol")
    app_id = (await apps.register(on.bob, "shop")).app.id
    await apps.grant(on.bob, app_id, "carol", "admin")
    with pytest.raises(PermissionDenied):
        await apps.grant(carol, app_id, "bob", "developer")
    with pytest.raises(PermissionDenied):
        await apps.revoke(carol, app_id, "bob")
    roles = {m["user"]: m["role"] for m in await apps.members(on.bob, app_id)}
    assert roles == {"bob": "owner", "carol": "admin"}


async def test_an_admin_cannot_change_another_admin_but_can_change_a_developer(
    on: OnFakes,
) -> None:
    apps = on.platform.apps
    carol, _ = await _user(on, "carol"), await _user(on, "dave")
    await _user(on, "erin")
    app_id = (await apps.register(on.bob, "shop")).app.id
    await apps.grant(on.bob, app_id, "carol", "admin")
    await apps.grant(on.bob, app_id, "dave", "admin")
    await apps.grant(on.bob, app_id, "erin", "developer")
    with pytest.raises(PermissionDenied):
        await apps.grant(carol, app_id, "dave", "viewer")
    with pytest.raises(PermissionDenied):
        await apps.revoke(carol, app_id, "dave")
    await apps.grant(carol, app_id, "erin", "viewer")
    assert await apps.revoke(carol, app_id, "erin") is True
    assert await apps.revoke(carol, app_id, "carol") is True  # leaving is always allowed


async def test_the_last_owner_can_neither_leave_nor_step_down(on: OnFakes) -> None:
    apps = on.platform.apps
    await _user(on, "carol")
    app_id = (await apps.register(on.bob, "shop")).app.id
    with pytest.raises(FailedPrecondition):
        await apps.revoke(on.bob, app_id, "bob")
    with pytest.raises(FailedPrecondition):
        await apps.grant(on.bob, app_id, "bob", "admin")
    with pytest.raises(FailedPrecondition):  # not even the tenant admin removes the last one
        await apps.revoke(on.alice, app_id, "bob")
    await apps.grant(on.bob, app_id, "carol", "owner")
    assert await apps.revoke(on.bob, app_id, "bob") is True  # another owner is left
    roles = {m["user"]: m["role"] for m in await apps.members(on.alice, app_id)}
    assert roles == {"carol": "owner"}


async def test_losing_read_access_announces_the_member_revoked(on: OnFakes) -> None:
    apps = on.platform.apps
    seen: list[Change] = []

    async def listen(change: Change) -> None:
        seen.append(change)

    on.platform.feed.subscribe(listen)
    app_id = (await apps.register(on.alice, "shop")).app.id
    await apps.grant(on.alice, app_id, "bob", "viewer")
    seen.clear()
    assert await apps.revoke(on.alice, app_id, "bob") is True
    assert seen[0] == Change("member.revoked", "acme", app_id, user=on.bob.user)
    assert [c.kind for c in seen] == ["member.revoked", "app.updated"]


async def test_concurrent_registrations_create_exactly_the_quota(
    storage: Storage, on: OnFakes
) -> None:
    base = on.platform.apps
    apps = AppService(
        base.store,
        IdentityStore(storage.engine),
        on.platform.feed,
        sources=base.sources,
        max_apps=100,
        url_of=lambda name, tenant: f"http://{name}--{tenant}.localhost",
        # the count of apps alone: quotas roomy enough for 114 default apps
        limits=Limits(tenant_memory_mb=10**6, tenant_instances=1000, tenant_disk_mb=10**6),
    )
    outcomes = await asyncio.wait_for(
        asyncio.gather(
            *(apps.register(on.bob, f"app{i}") for i in range(114)), return_exceptions=True
        ),
        timeout=60,
    )
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(outcomes) - len(refused) == 100
    assert all(isinstance(o, QuotaExceeded) for o in refused), refused[:3]
    assert await apps.store.count("acme") == 100
