"""manage_api_key through the HTTP app, every result (errors included) checked against its
outputSchema; and, with the fixture app deployed behind the real ingress, what the keys do:
no key 401, a key 200 (the app sees its id, never the key), a revoked key 401, a rotated key's
old value 401 and its new one 200, api_auth: none opening the app again at once."""

from __future__ import annotations

from typing import Any

import httpx
from jsonschema import Draft202012Validator

from tests.tools.conftest import Caller, World


async def _checked(caller: Caller, **arguments: Any) -> dict[str, Any]:
    """The tool's result, after checking it against the outputSchema tools/list gives."""
    listed = await caller.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == "manage_api_key"]
    result = await caller.tool("manage_api_key", **arguments)
    Draft202012Validator(tool["outputSchema"]).validate(result["structuredContent"])
    return result


async def _ok(caller: Caller, **arguments: Any) -> dict[str, Any]:
    result = await _checked(caller, **arguments)
    assert not result.get("isError"), result
    return dict(result["structuredContent"])


async def _error(caller: Caller, **arguments: Any) -> str:
    result = await _checked(caller, **arguments)
    assert result.get("isError") is True, result
    return str(result["structuredContent"]["error"]["code"])


async def test_keys_are_made_listed_rotated_and_revoked(world: World) -> None:
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    made = await _ok(alice, action="create", app_id=app_id, name="billing", scopes=["read"])
    key, secret = made["key"], made["api_key"]
    assert secret.startswith("adk_key_")
    assert (key["prefix"], key["scopes"], key["status"]) == (secret[:12], ["read"], "active")
    assert made["api_auth"] == "none"
    listed = await _ok(alice, action="list", app_id=app_id)
    assert [k["id"] for k in listed["keys"]] == [key["id"]]
    assert listed["api_auth"] == "none"
    assert secret not in str(listed)
    got = await _ok(alice, action="get", app_id=app_id, key_id=key["id"])
    assert got["key"] == key
    assert "api_key" not in got

    rotated = await _ok(alice, action="rotate", app_id=app_id, key_id=key["id"])
    assert rotated["api_key"] not in (None, secret)
    assert rotated["key"]["rotated_from"] == key["id"]
    assert rotated["key"]["scopes"] == ["read"]
    assert rotated["replaced"]["status"] == "revoked"
    new_id = rotated["key"]["id"]
    assert await _error(alice, action="rotate", app_id=app_id, key_id=key["id"]) == (
        "failed_precondition"
    )

    refused = await _checked(alice, action="revoke", app_id=app_id, key_id=new_id)
    assert refused["structuredContent"]["error"]["code"] == "failed_precondition"
    assert "confirm" in refused["structuredContent"]["error"]["hint"]
    revoked = await _ok(alice, action="revoke", app_id=app_id, key_id=new_id, confirm=True)
    assert (revoked["revoked"], revoked["key"]["status"]) == (True, "revoked")
    statuses = [k["status"] for k in (await _ok(alice, action="list", app_id=app_id))["keys"]]
    assert statuses == ["revoked", "revoked"]


async def test_only_the_apps_admins_see_its_keys(world: World) -> None:
    alice = await world.caller("alice")
    bob = await world.caller("bob")
    eve = await world.caller("eve", tenant="globex")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    made = await _ok(alice, action="create", app_id=app_id, name="k")
    assert await _error(eve, action="list", app_id=app_id) == "not_found"
    assert await _error(bob, action="get", app_id=app_id, key_id=made["key"]["id"]) == "not_found"
    await alice.ok("manage_app", action="grant", app_id=app_id, user="bob", role="developer")
    assert await _error(bob, action="create", app_id=app_id, name="mine") == "forbidden"
    assert await _error(alice, action="get", app_id=app_id, key_id="key_nope") == "not_found"


async def test_bad_arguments_are_refused_naming_the_field(world: World) -> None:
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    for arguments in (
        {"action": "create", "name": ""},
        {"action": "create", "name": "x" * 101},
        {"action": "create", "name": "line\nbreak"},
        {"action": "create", "name": "k", "scopes": ["admin"]},
        {"action": "create", "name": "k", "scopes": []},
        {"action": "create", "name": "k", "expires_in_days": 0},
        {"action": "create", "name": "k", "expires_in_days": 3651},
        {"action": "create", "name": "k", "key": "adk_key_mine"},
        {"action": "get", "key_id": "k" * 101},
        {"action": "list", "limit": 0},
        {"action": "list", "cursor": "not a cursor"},
    ):
        assert await _error(alice, app_id=app_id, **arguments) == "invalid_argument", arguments
    assert (await _ok(alice, action="list", app_id=app_id))["keys"] == []


async def test_a_read_token_lists_keys_but_needs_apis_write_to_make_one(world: World) -> None:
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    reader = await world.caller("alice", scope="apis:read")
    assert (await _ok(reader, action="list", app_id=app_id))["keys"] == []
    r = await reader.client.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "manage_api_key",
                "arguments": {"action": "create", "app_id": app_id, "name": "k"},
            },
        },
        headers={
            "authorization": f"Bearer {reader.token}",
            "mcp-session-id": reader.session,
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        },
    )
    assert r.status_code == 403  # step-up: create needs apis:write
    assert r.json()["error"]["data"] == {"scope": "apis:write"}


async def test_the_ingress_enforces_the_keys_of_a_deployed_app(deploy_world: World) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    spec = {
        "source_path": str(world.source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "api_auth": "required",
    }
    app_id = (await alice.ok("register_app", name="hello", spec=spec))["app_id"]
    deployed = await alice.ok("deploy_app", app_id=app_id, strategy="recreate", wait_seconds=60)
    assert deployed["state"] == "live", deployed
    assert world.services.ingress is not None
    port = world.services.ingress.port

    async def get(path: str, key: str | None = None, **headers: str) -> httpx.Response:
        if key is not None:
            headers["x-api-key"] = key
        async with httpx.AsyncClient(timeout=10) as http:
            return await http.get(
                f"http://127.0.0.1:{port}{path}",
                headers={"host": "hello--acme.localhost", **headers},
            )

    missing = await get("/")
    assert missing.status_code == 401, missing.text
    assert missing.headers["www-authenticate"] == "ApiKey"
    made = await alice.ok("manage_api_key", action="create", app_id=app_id, name="client")
    assert made["api_auth"] == "required"
    secret, key_id = made["api_key"], made["key"]["id"]
    assert (await get("/", secret)).status_code == 200
    echoed = (await get("/headers", secret, **{"x-appdeck-key-id": "key_forged"})).json()
    seen = {k.lower(): v for k, v in echoed["headers"].items()}
    assert seen["x-appdeck-key-id"] == key_id
    assert "x-api-key" not in seen

    rotated = await alice.ok("manage_api_key", action="rotate", app_id=app_id, key_id=key_id)
    assert (await get("/", secret)).status_code == 401
    assert (await get("/", rotated["api_key"])).status_code == 200
    await alice.ok(
        "manage_api_key",
        action="revoke",
        app_id=app_id,
        key_id=rotated["key"]["id"],
        confirm=True,
    )
    assert (await get("/", rotated["api_key"])).status_code == 401

    await alice.ok("set_app_spec", app_id=app_id, spec={"api_auth": "none"})
    assert (await get("/")).status_code == 200  # at once, without a deploy
