"""Through the tools: roles never let anyone touch a role at or above their own, a revoked
member stops hearing about the app, the quota holds under a burst, and values that would fail
later are refused as invalid_argument naming the field."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .conftest import SHARED_ROOT, Caller, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests


async def _error(caller: Caller, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await caller.tool(tool, **arguments)
    assert result.get("isError") is True, result
    return dict(result["structuredContent"]["error"])


async def test_an_app_admin_cannot_demote_or_remove_the_owner_or_another_admin(
    world: World,
) -> None:
    await world.admin.create_user("acme", "dave", None)
    bob, carol = await world.caller("bob"), await world.caller("carol")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    for user in ("carol", "dave"):
        await bob.ok("manage_app", app_id=app_id, action="grant", user=user, role="admin")
    for target in ("bob", "dave"):
        assert (
            await carol.error("manage_app", app_id=app_id, action="revoke", user=target)
            == "forbidden"
        )
        assert (
            await carol.error(
                "manage_app", app_id=app_id, action="grant", user=target, role="viewer"
            )
            == "forbidden"
        )
    members = (await bob.ok("manage_app", app_id=app_id, action="get"))["members"]
    assert {m["user"]: m["role"] for m in members} == {
        "bob": "owner",
        "carol": "admin",
        "dave": "admin",
    }
    assert (
        await bob.error("manage_app", app_id=app_id, action="revoke", user="bob")
        == "failed_precondition"
    )  # the last owner cannot leave


async def _updates(world: World, caller: Caller, app_id: int) -> list[str]:
    events = await world.services.hub.log.replay(caller.session, "g", 0)
    notes = [json.loads(e.payload) for e in events]
    return [
        n["params"]["uri"]
        for n in notes
        if n.get("method") == "notifications/resources/updated"
        and n["params"]["uri"].startswith(f"appdeck://apps/{app_id}")
    ]


async def test_a_revoked_member_stops_receiving_updates_for_the_app(world: World) -> None:
    bob, carol = await world.caller("bob"), await world.caller("carol")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    for uri in (f"appdeck://apps/{app_id}", f"appdeck://apps/{app_id}/deployments"):
        assert (await carol.rpc("resources/subscribe", {"uri": uri}))["result"] == {}
    await bob.ok("set_app_spec", app_id=app_id, spec={"instances": 2})
    heard = await _updates(world, carol, app_id)
    assert f"appdeck://apps/{app_id}" in heard  # subscribed, she hears
    await bob.ok("manage_app", app_id=app_id, action="revoke", user="carol")
    await bob.ok("set_app_spec", app_id=app_id, spec={"instances": 3})
    await bob.ok("manage_app", app_id=app_id, action="update", description="changed")
    assert await _updates(world, carol, app_id) == heard  # nothing more since the revoke
    assert len(await _updates(world, bob, app_id)) == 0  # bob never subscribed


async def test_a_burst_of_registrations_creates_exactly_the_quota_and_none_fails_internally(
    world: World,
) -> None:
    bob = await world.caller("bob")
    results = await asyncio.wait_for(
        asyncio.gather(*(bob.tool("register_app", name=f"app{i}") for i in range(114))),
        timeout=120,
    )
    codes = [r["structuredContent"]["error"]["code"] if r.get("isError") else "ok" for r in results]
    assert codes.count("ok") == 5  # the world's quota
    assert set(codes) == {"ok", "quota_exceeded"}
    assert len((await bob.ok("list_my_apps"))["apps"]) == 5


async def test_an_app_id_beyond_int64_is_an_invalid_argument_naming_it(world: World) -> None:
    bob = await world.caller("bob")
    for tool, extra in (("get_app_url", {}), ("manage_app", {"action": "get"})):
        error = await _error(bob, tool, app_id=2**63, **extra)
        assert error["code"] == "invalid_argument", error
        assert error["details"]["field"] == "app_id", error
    error = await _error(bob, "rollback_deploy", app_id=1, number=2**63)
    assert error["code"] == "invalid_argument"
    assert error["details"]["field"] == "number", error


async def test_env_and_spec_values_that_would_fail_later_are_refused_naming_the_field(
    world: World,
) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    for arguments, field in (
        ({"values": {"FOO\n": "x"}}, "values"),
        ({"values": {"FOO": "a\x00b"}}, "values/FOO"),
        ({"name": "PORT", "value": "80"}, "values/PORT"),
    ):
        error = await _error(bob, "env_vars", app_id=app_id, action="set", **arguments)
        assert error["code"] == "invalid_argument", error
        assert error["details"]["field"] == field, error
    for spec, field in (
        ({"env": {"PORT": "80"}}, "spec/env/PORT"),
        ({"env": {"FOO": "a\x00b"}}, "spec/env/FOO"),
        ({"health_check": {"path": "/ok\r\nX: 1"}}, "spec/health_check/path"),
    ):
        error = await _error(bob, "set_app_spec", app_id=app_id, spec=spec)
        assert error["code"] == "invalid_argument", error
        assert error["details"]["field"] == field, error
    error = await _error(bob, "register_app", name="other", spec={"env": {"HOST": "x"}})
    assert error["details"]["field"] == "spec/env/HOST", error
    assert (await bob.ok("env_vars", app_id=app_id, action="list"))["vars"] == []
