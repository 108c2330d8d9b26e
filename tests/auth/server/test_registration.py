"""POST /register (RFC 7591) and the discovery documents."""

from __future__ import annotations

import pytest

from appdeck.auth import scopes
from appdeck.auth.server import redirects

from .conftest import ISSUER, RESOURCE, OAuthWorld


async def test_a_public_client_registers_as_vs_code_does(authz: OAuthWorld) -> None:
    body = {
        "client_name": "Visual Studio Code",
        "client_uri": "https://code.visualstudio.com",
        "grant_types": [
            "authorization_code",
            "refresh_token",
            "urn:ietf:params:oauth:grant-type:device_code",
        ],
        "response_types": ["code"],
        "redirect_uris": [
            "https://insiders.vscode.dev/redirect",
            "https://vscode.dev/redirect",
            "http://127.0.0.1/",
            "http://127.0.0.1:33418/",
        ],
        "token_endpoint_auth_method": "none",
    }
    r = await authz.http.post("/register", json=body)
    assert r.status_code == 201, r.text
    registered = r.json()
    assert registered["client_id"]
    assert "client_secret" not in registered
    assert registered["grant_types"] == [
        "authorization_code",
        "refresh_token",
    ]  # device code dropped
    assert registered["redirect_uris"] == body["redirect_uris"]
    assert registered["token_endpoint_auth_method"] == "none"
    assert registered["client_name"] == "Visual Studio Code"
    assert isinstance(registered["client_id_issued_at"], int)
    assert r.headers["cache-control"] == "no-store"
    stored = await authz.oauth.get_client(registered["client_id"])
    assert stored is not None
    assert stored.kind == "dcr"
    assert stored.secret_hash is None


async def test_a_client_that_names_no_auth_method_gets_a_secret(authz: OAuthWorld) -> None:
    r = await authz.http.post(
        "/register", json={"redirect_uris": ["https://claude.ai/api/mcp/auth_callback"]}
    )
    assert r.status_code == 201
    body = r.json()
    assert body["token_endpoint_auth_method"] == "client_secret_basic"
    assert body["client_secret"]
    assert body["client_secret_expires_at"] == 0
    stored = await authz.oauth.get_client(body["client_id"])
    assert stored is not None
    assert body["client_secret"] not in repr(stored)


@pytest.mark.parametrize(
    "uri",
    [
        "javascript:alert(1)",
        "data:text/html,hi",
        "http://evil.example/cb",
        "http://192.168.1.10/cb",
        "https://app.example/cb#frag",
        "https://user:pw@app.example/cb",
        "https://*.example/cb",
        "https://app.example/c b",
        "file:///etc/passwd",
        "relative/path",
        "",
    ],
)
async def test_dangerous_redirect_uris_are_refused(authz: OAuthWorld, uri: str) -> None:
    r = await authz.http.post(
        "/register", json={"redirect_uris": [uri], "token_endpoint_auth_method": "none"}
    )
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_redirect_uri"


@pytest.mark.parametrize(
    "uri",
    [
        "https://app.example/cb?x=1",
        "http://localhost:8765/callback",
        "http://[::1]:9000/cb",
        "vscode://vscode.github-authentication/did-authenticate",
        "com.example.app:/oauth2redirect",
        "cursor://anysphere.cursor-retrieval/oauth/callback",
    ],
)
def test_web_loopback_and_private_use_redirect_uris_are_allowed(uri: str) -> None:
    assert redirects.validate(uri) == uri


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "invalid_redirect_uri"),
        ({"redirect_uris": "https://a.example/cb"}, "invalid_redirect_uri"),
        ({"redirect_uris": [f"https://a.example/{i}" for i in range(11)]}, "invalid_redirect_uri"),
        (
            {
                "redirect_uris": ["https://a.example/cb"],
                "token_endpoint_auth_method": "private_key_jwt",
            },
            "invalid_client_metadata",
        ),
        (
            {"redirect_uris": ["https://a.example/cb"], "grant_types": ["client_credentials"]},
            "invalid_client_metadata",
        ),
        (
            {"redirect_uris": ["https://a.example/cb"], "response_types": ["token"]},
            "invalid_client_metadata",
        ),
        (
            {"redirect_uris": ["https://a.example/cb"], "client_name": "x" * 201},
            "invalid_client_metadata",
        ),
        (
            {"redirect_uris": ["https://a.example/cb"], "client_uri": "javascript:alert(1)"},
            "invalid_client_metadata",
        ),
    ],
)
async def test_invalid_client_metadata_is_refused(
    authz: OAuthWorld, body: dict[str, object], error: str
) -> None:
    r = await authz.http.post("/register", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == error


async def test_registration_wants_a_small_json_object(authz: OAuthWorld) -> None:
    r = await authz.http.post(
        "/register",
        content=b"redirect_uris=x",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_client_metadata"
    r = await authz.http.post(
        "/register", content=b"[1, 2]", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400
    r = await authz.http.post(
        "/register", json={"redirect_uris": ["https://a.example/cb"], "pad": "x" * 20_000}
    )
    assert r.status_code == 413


async def test_the_authorization_server_metadata_advertises_what_mcp_clients_need(
    authz: OAuthWorld,
) -> None:
    r = await authz.http.get("/.well-known/oauth-authorization-server")
    assert r.status_code == 200
    meta = r.json()
    assert meta["issuer"] == ISSUER
    for name in ("authorization", "token", "registration", "revocation"):
        assert meta[f"{name}_endpoint"].startswith(ISSUER + "/")
    assert meta["jwks_uri"] == f"{ISSUER}/.well-known/jwks.json"
    assert meta["scopes_supported"] == list(scopes.SCOPES)
    assert meta["response_types_supported"] == ["code"]
    assert meta["grant_types_supported"] == [
        "authorization_code",
        "refresh_token",
        "client_credentials",
    ]
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert "none" in meta["token_endpoint_auth_methods_supported"]
    assert meta["revocation_endpoint_auth_methods_supported"]
    assert meta["client_id_metadata_document_supported"] is True
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert r.headers["access-control-allow-origin"] == "*"


async def test_the_protected_resource_metadata_is_served_at_both_well_known_paths(
    authz: OAuthWorld,
) -> None:
    for path in (
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ):
        r = await authz.http.get(path)
        assert r.status_code == 200, path
        assert r.json() == {
            "resource": RESOURCE,
            "authorization_servers": [ISSUER],
            "scopes_supported": list(scopes.SCOPES),
            "bearer_methods_supported": ["header"],
            "resource_name": "AppDeck",
        }


async def test_the_jwks_holds_public_keys_only(authz: OAuthWorld) -> None:
    keys = (await authz.http.get("/.well-known/jwks.json")).json()["keys"]
    assert [k["kid"] for k in keys] == [authz.keys.kid]
    assert all("d" not in k and k["kty"] == "EC" for k in keys)


async def test_browser_clients_may_preflight_the_apis_but_not_openid_discovery(
    authz: OAuthWorld,
) -> None:
    r = await authz.http.options(
        "/token",
        headers={"Origin": "https://inspector.example", "Access-Control-Request-Method": "POST"},
    )
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "*"
    assert "mcp-protocol-version" in r.headers["access-control-allow-headers"].lower()
    assert (await authz.http.get("/.well-known/openid-configuration")).status_code == 404


async def test_a_registered_client_never_used_is_swept_after_the_grace_period(
    authz: OAuthWorld,
) -> None:
    from .helpers import get_code, register

    unused = (await register(authz.http))["client_id"]
    used = (await register(authz.http))["client_id"]
    await get_code(authz.http, used)
    assert (await authz.server.cleanup())["unused_clients"] == 0
    authz.clock.offset += authz.server._ctx.settings.unused_client_hours * 3600 + 60
    assert (await authz.server.cleanup())["unused_clients"] == 1
    assert await authz.oauth.get_client(unused) is None
    assert await authz.oauth.get_client(used) is not None
