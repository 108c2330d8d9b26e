"""manage_oauth_client through the HTTP app, and what its clients can do at the token
endpoint: client credentials give a token for the app (aud urn:appdeck:app:<id>, the app's
scopes) that AppDeck's /mcp refuses; a wrong, rotated-away or deleted secret gets nothing;
AppDeck's own resource cannot be asked for; such a client cannot start a sign-in. A client
with the authorization code grant signs the app's users in (accounts of the app's tenant
only) and gets them tokens for the app, refreshed by rotation."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import urlencode

import httpx
from jsonschema import Draft202012Validator

from tests.auth.server.helpers import parse_consent, pkce_pair, query_of
from tests.support.mcp import INIT, headers, request
from tests.tools.conftest import SHARED_ROOT, Caller, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests

CALLBACK = "https://shop.example/cb"


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


async def _authorize(world: World, client_id: str, challenge: str, **params: str) -> httpx.Response:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "s1",
        **params,
    }
    return await world.client.get("/authorize", params=query)


async def _sign_in(
    world: World, page: httpx.Response, tenant: str, username: str, password: str
) -> httpx.Response:
    form = parse_consent(page.text)
    answer = form.answer(tenant=tenant, username=username, password=password)
    return await world.client.post(
        form.action,
        content=urlencode(answer),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )


async def test_an_apps_users_sign_in_and_get_refreshable_tokens_for_the_app(
    world: World,
) -> None:
    await world.admin.create_user("acme", "dora", "dora-password-1")
    await world.admin.create_user("globex", "gus", "gus-password-1")
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    made = await _checked(
        alice,
        action="create",
        app_id=app_id,
        name="Shop web",
        scopes=["orders:read", "orders:write"],
        grant_types=["authorization_code", "refresh_token"],
        redirect_uris=[CALLBACK],
    )
    created = made["structuredContent"]
    client_id, secret = created["client"]["client_id"], created["client_secret"]

    verifier, challenge = pkce_pair()
    page = await _authorize(world, client_id, challenge, scope="orders:read apps:write")
    assert page.status_code == 200, page.text
    assert "Shop web (shop)" in page.text  # the page names the client and its app
    assert parse_consent(page.text).scopes == {"orders:read": True}  # never AppDeck's scopes

    stranger = await _sign_in(world, page, "globex", "gus", "gus-password-1")
    assert stranger.status_code == 200  # the form again: an app signs in its tenant only
    assert "Incorrect tenant, username or password." in stranger.text

    answered = await _sign_in(world, page, "acme", "dora", "dora-password-1")
    assert answered.status_code == 303, answered.text
    back = query_of(answered.headers["location"])
    assert back["state"] == "s1"
    redeemed = await world.client.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": back["code"],
            "code_verifier": verifier,
            "redirect_uri": CALLBACK,
        },
        auth=(client_id, secret),
    )
    assert redeemed.status_code == 200, redeemed.text
    tokens = redeemed.json()
    claims = _claims(tokens["access_token"])
    assert (claims["aud"], claims["scope"], claims["tid"]) == (
        f"urn:appdeck:app:{app_id}",
        "orders:read",
        "acme",
    )
    refused = await world.client.post(
        "/mcp", json=request("initialize", INIT), headers=headers(token=tokens["access_token"])
    )
    assert refused.status_code == 401  # the app's token opens nothing of AppDeck's

    refreshed = await world.client.post(
        "/token",
        data={"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
        auth=(client_id, secret),
    )
    assert refreshed.status_code == 200, refreshed.text
    assert _claims(refreshed.json()["access_token"])["aud"] == f"urn:appdeck:app:{app_id}"

    mcp_resource = f"{world.services.base_url}/mcp"
    wrong = await _authorize(world, client_id, challenge, resource=mcp_resource)
    assert wrong.status_code == 302
    assert query_of(wrong.headers["location"])["error"] == "invalid_target"
