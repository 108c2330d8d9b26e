"""The app tools as an agent uses them: register, list, url, manage, spec; roles; tenants."""

import json

from appdeck.tools.timestamps import iso

from .conftest import SHARED_ROOT, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests


async def test_an_agent_registers_lists_and_reads_an_app(world: World) -> None:
    bob = await world.caller("bob")
    made = await bob.ok("register_app", name="shop", description="a shop")
    assert made["name"] == "shop"
    assert made["your_role"] == "owner"
    assert made["url"].startswith("http://shop--acme.localhost:")  # the tenant is in the host
    assert made["spec"]["runtime"] == "python"  # defaults filled in
    listed = await bob.ok("list_my_apps")
    assert [a["name"] for a in listed["apps"]] == ["shop"]
    url = await bob.ok("get_app_url", app_id=made["app_id"])
    assert url["url"] == made["url"]
    got = await bob.ok("manage_app", app_id=made["app_id"], action="get")
    assert got["members"] == [
        {
            "user": "bob",
            "role": "owner",
            "granted_at": got["members"][0]["granted_at"],
            "granted_at_iso": iso(got["members"][0]["granted_at"]),
        }
    ]


async def test_names_are_slugs_and_unique_per_tenant(world: World) -> None:
    bob = await world.caller("bob")
    assert await bob.error("register_app", name="Bad Name") == "invalid_argument"
    await bob.ok("register_app", name="shop")
    assert await bob.error("register_app", name="shop") == "conflict"
    eve = await world.caller("eve", "globex")
    theirs = await eve.ok("register_app", name="shop")  # another tenant: another hostname
    assert theirs["name"] == "shop"
    assert theirs["url"].startswith("http://shop--globex.localhost:")


async def test_a_tenant_has_an_app_quota(world: World) -> None:
    bob = await world.caller("bob")
    for i in range(5):
        await bob.ok("register_app", name=f"app{i}")
    assert await bob.error("register_app", name="one-too-many") == "quota_exceeded"


async def test_another_tenants_app_is_not_found_never_forbidden(world: World) -> None:
    bob = await world.caller("bob")
    app = await bob.ok("register_app", name="shop")
    eve = await world.caller("eve", "globex")
    for tool, args in (
        ("get_app_url", {}),
        ("manage_app", {"action": "get"}),
        ("manage_app", {"action": "delete", "confirm": True}),
        ("set_app_spec", {"spec": {"instances": 2}}),
        ("env_vars", {"action": "list"}),
    ):
        assert await eve.error(tool, app_id=app["app_id"], **args) == "not_found", tool
    assert (await eve.ok("list_my_apps"))["apps"] == []


async def test_roles_decide_what_a_member_may_do(world: World) -> None:
    bob = await world.caller("bob")
    carol = await world.caller("carol")
    alice = await world.caller("alice")  # tenant admin: owner of every app
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    assert await carol.error("manage_app", app_id=app_id, action="get") == "not_found"
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    assert (await carol.ok("manage_app", app_id=app_id, action="get"))["your_role"] == "viewer"
    assert await carol.error("set_app_spec", app_id=app_id, spec={"instances": 2}) == "forbidden"
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="developer")
    assert (await carol.ok("set_app_spec", app_id=app_id, spec={"instances": 2}))["changed"] is True
    assert (
        await carol.error("manage_app", app_id=app_id, action="delete", confirm=True) == "forbidden"
    )
    assert (await alice.ok("manage_app", app_id=app_id, action="get"))["your_role"] == "owner"
    assert (
        await bob.error("manage_app", app_id=app_id, action="revoke", user="bob")
        == "failed_precondition"
    )


async def test_delete_needs_a_confirmation(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    assert await bob.error("manage_app", app_id=app_id, action="delete") == "failed_precondition"
    assert (await bob.ok("manage_app", app_id=app_id, action="get"))["name"] == "shop"
    assert (await bob.ok("manage_app", app_id=app_id, action="delete", confirm=True))[
        "deleted"
    ] is True
    assert await bob.error("manage_app", app_id=app_id, action="get") == "not_found"


async def test_set_app_spec_validates_diffs_and_dry_runs(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    bad = await bob.tool("set_app_spec", app_id=app_id, spec={"instances": 0})
    assert bad["isError"] is True
    assert "instances" in bad["structuredContent"]["error"]["message"]
    assert (
        await bob.error("set_app_spec", app_id=app_id, spec={"runtime": "cobol"})
        == "invalid_argument"
    )
    preview = await bob.ok("set_app_spec", app_id=app_id, spec={"instances": 3}, dry_run=True)
    assert preview["diff"] == [{"path": "/instances", "from": 1, "to": 3}]
    assert (await bob.ok("manage_app", app_id=app_id, action="get"))["spec"]["instances"] == 1
    done = await bob.ok(
        "set_app_spec", app_id=app_id, spec={"instances": 3, "health_check": {"path": "/healthz"}}
    )
    assert done["spec"]["health_check"] == {"path": "/healthz", "timeout_s": 5}
    assert done["spec_version"] == 2
    same = await bob.ok("set_app_spec", app_id=app_id, spec={"instances": 3})
    assert same["changed"] is False


async def test_source_paths_must_stay_inside_the_allowed_roots(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    ok = await bob.ok("set_app_spec", app_id=app_id, spec={"source_path": str(world.source)})
    assert ok["spec"]["source_path"] == str(world.source)
    for bad in (f"{world.source}/../../..", "/etc", "relative/path", str(world.source / "missing")):
        assert (
            await bob.error("set_app_spec", app_id=app_id, spec={"source_path": bad})
            == "invalid_argument"
        ), bad
    spec = (await bob.ok("manage_app", app_id=app_id, action="get"))["spec"]
    assert spec["source_path"] == str(world.source)  # nothing changed


async def test_the_apps_resources_follow_the_platform(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    listed = await bob.rpc("resources/list")
    uris = {r["uri"] for r in listed["result"]["resources"]}
    assert {
        "appdeck://apps",
        f"appdeck://apps/{app_id}",
        f"appdeck://apps/{app_id}/deployments",
    } <= uris
    read = await bob.rpc("resources/read", {"uri": f"appdeck://apps/{app_id}/spec"})
    assert json.loads(read["result"]["contents"][0]["text"])["spec"]["runtime"] == "python"
    assert (await bob.rpc("resources/subscribe", {"uri": f"appdeck://apps/{app_id}"}))[
        "result"
    ] == {}
    eve = await world.caller("eve", "globex")
    refused = await eve.rpc("resources/subscribe", {"uri": f"appdeck://apps/{app_id}"})
    assert refused["error"]["code"] == -32002
    missing = await bob.rpc("resources/read", {"uri": "appdeck://apps/999999"})
    assert missing["error"]["code"] == -32002
    await bob.ok("set_app_spec", app_id=app_id, spec={"instances": 2})
    events = await world.services.hub.log.replay(bob.session, "g", 0)
    notes = [json.loads(e.payload) for e in events]
    assert {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": f"appdeck://apps/{app_id}"},
    } in notes
    assert not await world.services.hub.log.replay(
        eve.session, "g", 0
    )  # other tenants hear nothing


async def test_the_deploy_prompts_are_filled_from_the_platform(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    listed = {p["name"] for p in (await bob.rpc("prompts/list"))["result"]["prompts"]}
    assert {"deploy_app_safely", "debug_failed_deploy"} <= listed
    safe = await bob.rpc(
        "prompts/get",
        {"name": "deploy_app_safely", "arguments": {"app_id": str(app_id), "strategy": "canary"}},
    )
    text = safe["result"]["messages"][0]["content"]["text"]
    assert "shop" in text
    assert "canary" in text
    assert "preflight_check" in text
    none_failed = await bob.rpc(
        "prompts/get", {"name": "debug_failed_deploy", "arguments": {"app_id": str(app_id)}}
    )
    assert "did not fail" in none_failed["result"]["messages"][0]["content"]["text"]
    missing = await bob.rpc("prompts/get", {"name": "deploy_app_safely", "arguments": {}})
    assert missing["error"]["code"] == -32602


async def test_a_prompt_for_another_tenants_app_is_invalid_params_not_internal(
    world: World,
) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    eve = await world.caller("eve", "globex")
    reply = await eve.rpc(
        "prompts/get", {"name": "deploy_app_safely", "arguments": {"app_id": str(app_id)}}
    )
    assert reply["error"]["code"] == -32602
    assert reply["error"]["data"]["code"] == "not_found"
    bad = await eve.rpc("prompts/get", {"name": "deploy_app_safely", "arguments": {"app_id": "x"}})
    assert bad["error"]["code"] == -32602


async def test_deploy_tools_refuse_bad_input_and_change_nothing(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    assert await bob.error("deploy_app", app_id=app_id, strategy="yolo") == "invalid_argument"
    assert await bob.error("deploy_app", app_id=999999) == "not_found"
    assert await bob.error("deploy_app", app_id=app_id) == "failed_precondition"  # no source yet
    assert await bob.error("rollback_deploy", app_id=app_id) == "failed_precondition"
    assert await bob.error("restart_app", app_id=app_id) == "failed_precondition"
    assert await bob.error("tail_deploy_logs", app_id=app_id) == "not_found"
    assert (await bob.ok("list_deployments", app_id=app_id))["deployments"] == []
    checks = {
        c["check"]: c["status"] for c in (await bob.ok("preflight_check", app_id=app_id))["checks"]
    }
    assert checks["source"] == "fail"
    assert checks["port"] == "pass"


async def test_a_description_with_nul_is_invalid_argument_on_both_dialects(world: World) -> None:
    # PostgreSQL text holds no NUL: this was an internal error there (property tests, once)
    alice = await world.caller("alice")
    assert await alice.error("register_app", name="shop", description="a\x00b") == (
        "invalid_argument"
    )
    await alice.ok("register_app", name="shop", description="fine")
