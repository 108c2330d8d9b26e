"""Through the tools, on SQLite and PostgreSQL: a spec beyond an operator ceiling is
invalid_argument naming the setting; beyond a tenant quota, quota_exceeded saying what the
tenant holds; and the check and the write are one transaction (of ten concurrent changes that
each fit alone but not two together, exactly one passes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.settings import Settings

from .conftest import Caller, World, _drop_app_databases


async def _error(caller: Caller, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await caller.tool(tool, **arguments)
    assert result.get("isError") is True, result
    return dict(result["structuredContent"]["error"])


async def test_a_spec_beyond_an_operator_ceiling_is_refused_naming_the_setting(
    world: World,
) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    for spec, field, setting in (
        ({"resources": {"memory_mb": 4096}}, "resources/memory_mb", "MAX_INSTANCE_MEMORY_MB"),
        ({"resources": {"cpus": 8}}, "resources/cpus", "MAX_INSTANCE_CPUS"),
        ({"resources": {"pids": 32768}}, "resources/pids", "MAX_INSTANCE_PIDS"),
        ({"instances": 10}, "instances", "MAX_INSTANCES_PER_APP"),
        ({"resources": {"disk_mb": 4096}}, "resources/disk_mb", "MAX_APP_DISK_MB"),
    ):
        error = await _error(bob, "set_app_spec", app_id=app_id, spec=spec)
        assert error["code"] == "invalid_argument", error
        assert f"APPDECK_{setting}" in error["message"], error
        assert error["details"]["field"] == f"spec/{field}", error
        assert error["details"]["setting"] == f"APPDECK_{setting}", error
    error = await _error(bob, "register_app", name="big", spec={"resources": {"memory_mb": 65536}})
    assert "APPDECK_MAX_INSTANCE_MEMORY_MB" in error["message"], error
    spec = (await bob.ok("manage_app", app_id=app_id, action="get"))["spec"]
    assert spec["resources"] == {"memory_mb": 512, "cpus": 1.0, "pids": 256, "disk_mb": 1024}
    assert spec["instances"] == 1  # nothing refused was written
    at_ceiling = {"resources": {"memory_mb": 2048, "cpus": 2, "pids": 512}, "instances": 4}
    assert (await bob.ok("set_app_spec", app_id=app_id, spec=at_ceiling))["changed"] is True


async def test_a_spec_beyond_the_tenant_quota_is_refused_saying_what_is_held(
    world: World,
) -> None:
    bob = await world.caller("bob")
    first = (await bob.ok("register_app", name="first"))["app_id"]
    big = {"resources": {"memory_mb": 2048}, "instances": 4}  # 8 GiB: the whole quota
    await bob.ok("set_app_spec", app_id=first, spec=big)
    error = await _error(bob, "register_app", name="second")
    assert error["code"] == "quota_exceeded", error
    assert "APPDECK_TENANT_MEMORY_MB" in error["message"], error
    assert "hold 8192" in error["message"], error
    assert error["details"]["used"] == 8192, error
    assert error["details"]["quota"] == "memory", error
    await bob.ok("set_app_spec", app_id=first, spec={"instances": 3})  # shrinking always may
    second = (await bob.ok("register_app", name="second"))["app_id"]
    grow = {"instances": 4, "resources": {"memory_mb": 1024}}
    error = await _error(bob, "set_app_spec", app_id=second, spec=grow)
    assert error["code"] == "quota_exceeded", error
    assert "hold 6144" in error["message"], error  # what the other app holds
    dry = await _error(bob, "set_app_spec", app_id=second, spec=grow, dry_run=True)
    assert dry["code"] == "quota_exceeded", dry


@pytest.fixture
async def roomy_world(database_url: str, tmp_path: Path) -> AsyncIterator[World]:
    """Ten apps may be registered (the tools' usual world allows five)."""
    settings = Settings.model_validate(
        {
            "data_dir": tmp_path / "data",
            "database_url": database_url,
            "source_roots": [tmp_path / "src"],
            "max_apps_per_tenant": 20,
            "rate_limit_per_second": 0,
        }
    )
    services = await Services.start(settings)
    admin = IdentityAdmin(services.identities, services.token_issuer)
    await admin.create_tenant("acme")
    await admin.create_user("acme", "bob", None)
    transport = httpx.ASGITransport(app=services.asgi())
    try:
        async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as client:
            yield World(services, client, admin, tmp_path / "src")
    finally:
        await _drop_app_databases(services)
        await services.stop(stop_apps=True)


async def test_ten_concurrent_spec_changes_that_fit_only_one_at_a_time_let_exactly_one_pass(
    roomy_world: World,
) -> None:
    bob = await roomy_world.caller("bob")
    small = {"resources": {"memory_mb": 256, "disk_mb": 64}}
    ids = [(await bob.ok("register_app", name=f"a{i}", spec=small))["app_id"] for i in range(10)]
    # each alone: 9 x 256 + 2 x 2048 = 6,400 MiB of 8,192; any two: 10,240
    grow = {"resources": {"memory_mb": 2048}, "instances": 2}
    results = await asyncio.wait_for(
        asyncio.gather(*(bob.tool("set_app_spec", app_id=i, spec=grow) for i in ids)),
        timeout=120,
    )
    codes = [r["structuredContent"]["error"]["code"] if r.get("isError") else "ok" for r in results]
    assert sorted(codes) == ["ok"] + ["quota_exceeded"] * 9, codes
    held = 0
    for app_id in ids:
        spec = (await bob.ok("manage_app", app_id=app_id, action="get"))["spec"]
        held += spec["instances"] * spec["resources"]["memory_mb"]
    assert held == 6400


async def test_ten_concurrent_registrations_beyond_the_memory_quota_let_exactly_one_pass(
    roomy_world: World,
) -> None:
    bob = await roomy_world.caller("bob")
    spec = {"resources": {"memory_mb": 2048, "disk_mb": 64}, "instances": 3}  # 6 GiB each
    results = await asyncio.wait_for(
        asyncio.gather(*(bob.tool("register_app", name=f"b{i}", spec=spec) for i in range(10))),
        timeout=120,
    )
    codes = [r["structuredContent"]["error"]["code"] if r.get("isError") else "ok" for r in results]
    assert sorted(codes) == ["ok"] + ["quota_exceeded"] * 9, codes
    assert len((await bob.ok("list_my_apps"))["apps"]) == 1
