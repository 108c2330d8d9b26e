"""Sources per tenant, as an agent meets the rule: a source outside the caller's own root (the
data dir, its parent, another tenant's root, a link swapped in after set_app_spec) is a clear
tool error at register_app, set_app_spec and deploy_app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.settings import Settings

from .conftest import Caller, World


@pytest.fixture
async def tenant_world(database_url: str, tmp_path: Path) -> AsyncIterator[World]:
    source = tmp_path / "sources" / "acme" / "hello"
    source.mkdir(parents=True)
    (source / "app.py").write_text("print('hi')\n")
    (tmp_path / "sources" / "globex" / "theirs").mkdir(parents=True)
    settings = Settings.model_validate(
        {
            "data_dir": tmp_path / "data",
            "database_url": database_url,
            "source_roots": [tmp_path / "sources" / "{tenant}"],
            "rate_limit_per_second": 0,
        }
    )
    services = await Services.start(settings)
    admin = IdentityAdmin(services.identities, services.token_issuer)
    for tenant, user in (("acme", "alice"), ("globex", "eve")):
        await admin.create_tenant(tenant)
        await admin.create_user(tenant, user, None, role="admin")
    transport = httpx.ASGITransport(app=services.asgi())
    async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as client:
        yield World(services, client, admin, source)
    await services.stop()


def _outside(world: World) -> dict[str, Path]:
    root = world.source.parents[2]  # tmp_path
    return {
        "the data dir": root / "data",
        "the signing keys": root / "data" / "keys",
        "the data dir's parent": root,
        "another tenant's root": root / "sources" / "globex" / "theirs",
        "every tenant's roots": root / "sources",
    }


async def _error(caller: Caller, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await caller.tool(tool, **arguments)
    assert result.get("isError") is True, result
    return dict(result["structuredContent"]["error"])


async def test_register_refuses_a_source_outside_the_callers_root(tenant_world: World) -> None:
    alice = await tenant_world.caller("alice", "acme")
    for what, path in _outside(tenant_world).items():
        error = await _error(alice, "register_app", name="x", spec={"source_path": str(path)})
        assert error["code"] == "invalid_argument", what
        assert "source root" in error["message"], what
        assert "acme" in error["hint"], what
        assert "globex" not in error["hint"], what
    assert (await alice.ok("list_my_apps"))["apps"] == []
    made = await alice.ok("register_app", name="x", spec={"source_path": str(tenant_world.source)})
    assert made["spec"]["source_path"] == str(tenant_world.source)


async def test_another_tenant_cannot_use_a_tenants_source(tenant_world: World) -> None:
    eve = await tenant_world.caller("eve", "globex")
    error = await _error(
        eve, "register_app", name="x", spec={"source_path": str(tenant_world.source)}
    )
    assert error["code"] == "invalid_argument"
    assert "globex" in error["hint"]
    assert "acme" not in error["hint"]


async def test_a_spec_change_refuses_a_source_outside_the_callers_root(
    tenant_world: World,
) -> None:
    alice = await tenant_world.caller("alice", "acme")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    for what, path in _outside(tenant_world).items():
        error = await _error(alice, "set_app_spec", app_id=app_id, spec={"source_path": str(path)})
        assert error["code"] == "invalid_argument", what
    spec = (await alice.ok("manage_app", app_id=app_id, action="get"))["spec"]
    assert spec["source_path"] is None  # nothing changed


async def test_a_source_swapped_for_a_link_after_set_app_spec_is_refused_at_deploy(
    tenant_world: World,
) -> None:
    alice = await tenant_world.caller("alice", "acme")
    spec = {"source_path": str(tenant_world.source), "run_command": "python3 app.py"}
    app_id = (await alice.ok("register_app", name="shop", spec=spec))["app_id"]
    moved = tenant_world.source.with_name("hello-old")
    tenant_world.source.rename(moved)
    tenant_world.source.symlink_to(tenant_world.source.parents[2] / "data")
    error = await _error(alice, "deploy_app", app_id=app_id, wait_seconds=0)
    assert error["code"] == "failed_precondition"
    assert "no longer passes the source check" in error["message"]
    assert "leads outside your source roots" in error["message"]
    assert (await alice.ok("list_deployments", app_id=app_id))["deployments"] == []
    # a spec change now refuses too, until the source is put right
    assert (await _error(alice, "set_app_spec", app_id=app_id, spec={"instances": 2}))[
        "code"
    ] == "invalid_argument"
    tenant_world.source.unlink()
    moved.rename(tenant_world.source)
    await alice.ok("set_app_spec", app_id=app_id, spec={"instances": 2})
