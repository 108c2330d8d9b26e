"""The whole journey through the real app: a client registers, the user signs in and
consents, the client calls MCP with the token, refreshes, is caught replaying, and revokes."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from authlib.common.security import generate_token
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client

from appdeck.auth import scopes
from tests.auth.server.helpers import parse_consent, post_form
from tests.support.mcp import INIT, headers, initialize, request

from .conftest import AuthWorld

REDIRECT = "http://127.0.0.1:45678/callback"
ALL = scopes.render(set(scopes.ALL))


async def _register(world: AuthWorld) -> str:
    r = await world.client.post(
        "/register",
        json={
            "client_name": "An MCP client",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
        },
    )
    assert r.status_code == 201, r.text
    return str(r.json()["client_id"])


async def _sign_in(world: AuthWorld, oc: AsyncOAuth2Client) -> dict[str, Any]:
    verifier = generate_token(64)
    resource = f"{world.services.base_url}/mcp"
    url, _ = oc.create_authorization_url(
        f"{world.services.base_url}/authorize", code_verifier=verifier, resource=resource
    )
    page = await oc.request("GET", url, withhold_token=True)
    assert page.status_code == 200, page.text
    form = parse_consent(page.text)
    answer = await post_form(oc, form, username="alice", password="correct horse battery")
    assert answer.status_code == 303, answer.text
    return dict(
        await oc.fetch_token(
            f"{world.services.base_url}/token",
            authorization_response=answer.headers["location"],
            code_verifier=verifier,
            resource=resource,
        )
    )


async def _mcp_status(world: AuthWorld, token: str) -> int:
    r = await world.client.post(
        "/mcp", json=request("initialize", INIT), headers=headers(token=token)
    )
    return r.status_code


async def test_a_client_registers_signs_in_calls_mcp_refreshes_and_revokes(
    world: AuthWorld,
) -> None:
    base = world.services.base_url
    prm = (await world.client.get("/.well-known/oauth-protected-resource")).json()
    assert prm["resource"] == f"{base}/mcp"
    assert prm["authorization_servers"] == [base]
    meta = (await world.client.get("/.well-known/oauth-authorization-server")).json()
    assert "none" in meta["token_endpoint_auth_methods_supported"]
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["client_id_metadata_document_supported"] is True

    client_id = await _register(world)
    transport = httpx2.ASGITransport(app=world.services.asgi())
    async with AsyncOAuth2Client(
        client_id=client_id,
        redirect_uri=REDIRECT,
        scope=ALL,
        code_challenge_method="S256",
        token_endpoint_auth_method="none",
        transport=transport,
        base_url=base,
    ) as oc:
        token = await _sign_in(world, oc)
        access = token["access_token"]
        sid = await initialize(world.client, access)
        called = await world.client.post(
            "/mcp",
            json=request("tools/call", {"name": "probe_deploy"}),
            headers=headers(sid, access),
        )
        assert called.json()["result"]["content"][0]["text"] == "ok"

        old_refresh = token["refresh_token"]
        rotated = await oc.refresh_token(f"{base}/token", refresh_token=old_refresh)
        assert rotated["refresh_token"] != old_refresh
        assert await _mcp_status(world, rotated["access_token"]) == 200

        replay = await world.client.post(
            "/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": old_refresh,
                "client_id": client_id,
            },
        )
        assert replay.status_code == 400
        assert replay.json()["error"] == "invalid_grant"
        # reuse detection revoked the whole family: the rotated tokens are dead too
        assert await _mcp_status(world, rotated["access_token"]) == 401
        with pytest.raises(OAuthError) as refused:
            await oc.refresh_token(f"{base}/token", refresh_token=rotated["refresh_token"])
        assert refused.value.error == "invalid_grant"

        fresh = await _sign_in(world, oc)
        assert await _mcp_status(world, fresh["access_token"]) == 200
        revoked = await world.client.post(
            "/revoke", data={"token": fresh["access_token"], "client_id": client_id}
        )
        assert revoked.status_code == 200
        assert await _mcp_status(world, fresh["access_token"]) == 401

    rows = await world.audit_rows()
    events = {r["event"] for r in rows}
    assert {"token_issued", "token_revoked", "refused"} <= events
    dump = str(rows)
    for secret in (access, old_refresh, rotated["refresh_token"], fresh["access_token"]):
        assert secret not in dump
