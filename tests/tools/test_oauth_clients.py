"""manage_oauth_client through the HTTP app, and what its clients can do at the token
endpoint: client credentials give a token for the app (aud urn:appdeck:app:<id>, the app's
scopes) that AppDeck's /mcp refuses; a wrong, rotated-away or deleted secret gets nothing;
AppDeck's own resource cannot be asked for; such a client cannot start a sign-in."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
from jsonschema import Draft202012Validator

from tests.support.mcp import INIT, headers, request
from tests.tools.conftest import Caller, World


async def _checked(caller: Caller, **arguments: Any) -> dict[str, Any]:
    listed = await caller.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == "manage_oauth_client"]
    result = await caller.tool("manage_oauth_client", **arguments)
    Draft202012Validator(tool["outputSchema"]).validate(result["structuredContent"])
    return result


async def _token(world: World, client_id: str, secret: str, **form: str) -> httpx.Response:
    return await world.client.post(
        "/token",
        data={"grant_type": "client_credentials", **form},
        auth=(client_id, secret),
    )


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


async def test_an_apps_client_gets_tokens_for_the_app_that_appdeck_refuses(world: World) -> None:
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    made = await _checked(
        alice,
        action="create",
        app_id=app_id,
        name="billing",
        scopes=["orders:read", "orders:write"],
    )
    created = made["structuredContent"]
    client_id, secret = created["client"]["client_id"], created["client_secret"]
    assert created["client"]["audience"] == f"urn:appdeck:app:{app_id}"

    issued = await _token(world, client_id, secret, scope="orders:read")
    assert issued.status_code == 200, issued.text
    token = issued.json()["access_token"]
    claims = _claims(token)
    assert (claims["aud"], claims["scope"], claims["tid"]) == (
        f"urn:appdeck:app:{app_id}",
        "orders:read",
        "acme",
    )
    assert claims["sub"] == f"client:{client_id}"
    refused = await world.client.post(
        "/mcp", json=request("initialize", INIT), headers=headers(token=token)
    )
    assert refused.status_code == 401  # a token for the app opens nothing of AppDeck's

    assert (await _token(world, client_id, "adk_cs_wrong")).status_code == 401
    assert (await _token(world, client_id, secret, scope="apps:write")).json()["error"] == (
        "invalid_scope"
    )
    mcp_resource = f"{world.services.base_url}/mcp"
    wrong_target = await _token(world, client_id, secret, resource=mcp_resource)
    assert wrong_target.json()["error"] == "invalid_target"
    right_target = await _token(world, client_id, secret, resource=f"urn:appdeck:app:{app_id}")
    assert right_target.status_code == 200

    signin = await world.client.get(
        "/authorize",
        params={"client_id": client_id, "response_type": "code", "redirect_uri": "https://x/cb"},
    )
    assert signin.status_code == 400  # no sign-in through an app's machine client

    rotated = (await _checked(alice, action="rotate_secret", app_id=app_id, client_id=client_id))[
        "structuredContent"
    ]
    assert (await _token(world, client_id, secret)).status_code == 401
    assert (await _token(world, client_id, rotated["client_secret"])).status_code == 200

    listed = (await _checked(alice, action="list", app_id=app_id))["structuredContent"]
    assert [c["client_id"] for c in listed["clients"]] == [client_id]
    assert "client_secret" not in json.dumps(listed)

    unconfirmed = await _checked(alice, action="delete", app_id=app_id, client_id=client_id)
    assert unconfirmed["structuredContent"]["error"]["code"] == "failed_precondition"
    await alice.ok(
        "manage_oauth_client", action="delete", app_id=app_id, client_id=client_id, confirm=True
    )
    assert (await _token(world, client_id, rotated["client_secret"])).status_code == 401


async def test_roles_tenants_and_bad_values_are_clear_errors(world: World) -> None:
    alice, bob = await world.caller("alice"), await world.caller("bob")
    eve = await world.caller("eve", tenant="globex")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    create = {"action": "create", "app_id": app_id, "name": "c", "scopes": ["orders:read"]}
    assert await eve.error("manage_oauth_client", **create) == "not_found"
    await alice.ok("manage_app", action="grant", app_id=app_id, user="bob", role="developer")
    assert await bob.error("manage_oauth_client", **create) == "forbidden"
    for bad in (
        {"scopes": ["apps:read"]},
        {"scopes": []},
        {"name": ""},
        {"grant_types": ["authorization_code"]},
        {"redirect_uris": ["http://evil.example/cb"]},
        {"app_id": 2**63},
    ):
        result = await _checked(alice, **{**create, **bad})
        assert result["structuredContent"]["error"]["code"] == "invalid_argument", bad
    missing = await _checked(alice, action="get", app_id=app_id, client_id="adk_app_nope")
    assert missing["structuredContent"]["error"]["code"] == "not_found"
