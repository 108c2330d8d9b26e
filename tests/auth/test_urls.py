"""A loopback server answers OAuth discovery under each loopback spelling (localhost,
127.0.0.1, [::1]) as the client spelled it, tokens are good under every spelling, and a Host
that is not one of ours gets the canonical names (and /mcp still refuses it)."""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from appdeck.auth.urls import PublicUrls
from appdeck.settings import Settings
from tests.auth.server.helpers import parse_consent, post_form
from tests.support.mcp import INIT, headers, request

from .conftest import AuthWorld

SPELLINGS = ("localhost", "127.0.0.1", "[::1]")
REDIRECT = "http://127.0.0.1:45678/callback"


def _client(world: AuthWorld, name: str) -> httpx.AsyncClient:
    base = f"http://{name}:{urlsplit(world.services.base_url).port}"
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=world.services.asgi()), base_url=base
    )


def test_only_a_plain_http_loopback_base_gets_the_other_spellings() -> None:
    urls = PublicUrls.build("http://127.0.0.1:8080/", loopback_aliases=True)
    assert urls.bases == ("http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080")
    assert urls.base_for("LOCALHOST:8080") == "http://localhost:8080"
    assert urls.base_for("localhost:9999") == "http://127.0.0.1:8080"  # another port
    assert urls.base_for("evil.example:8080") == "http://127.0.0.1:8080"
    assert urls.is_resource("http://[::1]:8080/mcp/")
    assert not urls.is_resource("http://evil.example:8080/mcp")
    for base, aliases in (
        ("https://deck.example.com", False),
        ("http://10.0.0.5:8080", True),
        ("http://127.0.0.1:8080", False),
    ):
        built = PublicUrls.build(base, loopback_aliases=aliases)
        assert built.bases == (base,)
        assert built.base_for("localhost:8080") == base


def test_a_server_bound_to_ipv6_loopback_gets_a_bracketed_base_and_the_other_spellings() -> None:
    base = Settings(host="::1").base_url(8080)
    assert base == "http://[::1]:8080"
    urls = PublicUrls.build(base, loopback_aliases=True)
    assert urls.base_for("localhost:8080") == "http://localhost:8080"


@pytest.mark.parametrize("name", SPELLINGS)
async def test_discovery_follows_the_spelling_the_client_used(world: AuthWorld, name: str) -> None:
    async with _client(world, name) as http:
        base = str(http.base_url).rstrip("/")
        refused = await http.post("/mcp", json=request("initialize", INIT), headers=headers())
        assert refused.status_code == 401
        challenge = refused.headers["www-authenticate"]
        assert f'resource_metadata="{base}/.well-known/oauth-protected-resource"' in challenge
        for path in (
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp",
        ):
            prm = (await http.get(path)).json()
            assert prm["resource"] == f"{base}/mcp"
            assert prm["authorization_servers"] == [base]
        meta = (await http.get("/.well-known/oauth-authorization-server")).json()
        assert meta["issuer"] == base
        assert meta["authorization_endpoint"] == f"{base}/authorize"
        assert meta["token_endpoint"] == f"{base}/token"


@pytest.mark.parametrize("name", SPELLINGS)
async def test_a_step_up_challenge_names_the_metadata_under_the_clients_spelling(
    world: AuthWorld, name: str
) -> None:
    token = await world.token("apps:read")
    async with _client(world, name) as http:
        base = str(http.base_url).rstrip("/")
        r = await http.post("/mcp", json=request("initialize", INIT), headers=headers(token=token))
        sid = r.headers["mcp-session-id"]
        call = request("tools/call", {"name": "probe_deploy", "arguments": {}})
        r = await http.post("/mcp", json=call, headers=headers(sid, token))
        assert r.status_code == 403
        challenge = r.headers["www-authenticate"]
        assert 'error="insufficient_scope"' in challenge
        assert f'resource_metadata="{base}/.well-known/oauth-protected-resource' in challenge


async def test_a_token_got_under_one_spelling_works_under_every_other(world: AuthWorld) -> None:
    async with _client(world, "localhost") as http:
        base = str(http.base_url).rstrip("/")
        reg = await http.post(
            "/register",
            json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
        )
        client_id = reg.json()["client_id"]
        verifier = secrets.token_urlsafe(48)
        digest = hashlib.sha256(verifier.encode()).digest()
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "state": "s",
            "code_challenge": base64.urlsafe_b64encode(digest).rstrip(b"=").decode(),
            "code_challenge_method": "S256",
            "scope": "apps:read",
            "resource": f"{base}/mcp",
        }
        page = await http.get(f"/authorize?{urlencode(query)}")
        form = parse_consent(page.text)
        assert form.action == f"{base}/authorize"
        answer = await post_form(
            http, form, tenant="acme", username="alice", password="correct horse battery"
        )
        params = {k: v[0] for k, v in parse_qs(urlsplit(answer.headers["location"]).query).items()}
        assert params["iss"] == base  # RFC 9207: the issuer the client discovered
        token = await http.post(
            "/token",
            data={
                "grant_type": "authorization_code",
                "code": params["code"],
                "code_verifier": verifier,
                "redirect_uri": REDIRECT,
                "client_id": client_id,
                "resource": f"{base}/mcp",
            },
        )
        assert token.status_code == 200, token.text
        access = token.json()["access_token"]
    for name in SPELLINGS:
        async with _client(world, name) as http:
            r = await http.post(
                "/mcp", json=request("initialize", INIT), headers=headers(token=access)
            )
            assert r.status_code == 200, (name, r.text)


async def test_a_foreign_host_gets_the_canonical_names_and_no_mcp(world: AuthWorld) -> None:
    base = world.services.base_url
    port = urlsplit(base).port
    evil = {"host": f"evil.example:{port}"}
    prm = (await world.client.get("/.well-known/oauth-protected-resource", headers=evil)).json()
    assert prm["resource"] == f"{base}/mcp"
    meta = (await world.client.get("/.well-known/oauth-authorization-server", headers=evil)).json()
    assert meta["issuer"] == base
    token = await world.token("apps:read")
    r = await world.client.post(
        "/mcp", json=request("initialize", INIT), headers={**headers(token=token), **evil}
    )
    assert r.status_code in (403, 421)
    assert "evil.example" not in r.headers.get("www-authenticate", "")
