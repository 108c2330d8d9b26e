"""POST /token: codes with PKCE, refresh rotation, client credentials, client authentication."""

from __future__ import annotations

import base64

import httpx

from .conftest import RESOURCE, OAuthWorld
from .helpers import get_code, redeem, register


def basic(client_id: str, secret: str) -> dict[str, str]:
    raw = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def assert_error(r: httpx.Response, error: str, status: int = 400) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"] == error, r.text
    assert r.headers["cache-control"] == "no-store"


async def test_a_code_redeems_once_for_tokens_that_say_their_lifetime_and_scope(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    code, verifier = await get_code(
        authz.http, client["client_id"], untick=frozenset({"apps:write"})
    )
    r = await redeem(authz.http, client["client_id"], code, verifier)
    assert r.status_code == 200
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    assert set(body) == {"access_token", "token_type", "expires_in", "refresh_token", "scope"}
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    assert "apps:write" not in body["scope"].split()
    assert "apps:read" in body["scope"].split()


async def test_a_wrong_code_verifier_is_refused_and_burns_the_code(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    code, verifier = await get_code(authz.http, client["client_id"])
    other = "A" * 43
    assert_error(await redeem(authz.http, client["client_id"], code, other), "invalid_grant")
    assert_error(await redeem(authz.http, client["client_id"], code, verifier), "invalid_grant")


async def test_a_missing_or_malformed_code_verifier_is_an_invalid_request(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    code, verifier = await get_code(authz.http, client["client_id"])
    assert_error(await redeem(authz.http, client["client_id"], code, "short"), "invalid_request")
    r = await redeem(authz.http, client["client_id"], code, verifier)  # not burnt by those
    assert r.status_code == 200


async def test_a_replayed_code_fails_and_revokes_what_it_produced(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    code, verifier = await get_code(authz.http, client["client_id"])
    first = (await redeem(authz.http, client["client_id"], code, verifier)).json()
    replay = await redeem(authz.http, client["client_id"], code, verifier)
    assert_error(replay, "invalid_grant")
    jti = authz.verifier().verify(first["access_token"])["jti"]
    assert [j for j, _ in authz.revoked] == [jti]
    refresh = await authz.http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": first["refresh_token"],
            "client_id": client["client_id"],
        },
    )
    assert_error(refresh, "invalid_grant")


async def test_the_redirect_uri_must_match_the_authorization_request(authz: OAuthWorld) -> None:
    client = await register(
        authz.http, redirect_uris=["http://127.0.0.1:33418/", "https://a.example/cb"]
    )
    code, verifier = await get_code(authz.http, client["client_id"])
    r = await redeem(
        authz.http, client["client_id"], code, verifier, redirect_uri="https://a.example/cb"
    )
    assert_error(r, "invalid_grant")
    code, verifier = await get_code(authz.http, client["client_id"])
    r = await authz.http.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "code_verifier": verifier,
            "client_id": client["client_id"],
        },
    )
    assert_error(r, "invalid_request")


async def test_a_code_is_only_for_the_client_it_was_issued_to(authz: OAuthWorld) -> None:
    mine = await register(authz.http)
    theirs = await register(authz.http)
    code, verifier = await get_code(authz.http, mine["client_id"])
    assert_error(await redeem(authz.http, theirs["client_id"], code, verifier), "invalid_grant")


async def test_an_expired_code_is_refused(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    code, verifier = await get_code(authz.http, client["client_id"])
    authz.clock.offset += 301
    assert_error(await redeem(authz.http, client["client_id"], code, verifier), "invalid_grant")


async def test_a_foreign_resource_at_the_token_endpoint_is_invalid_target(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    code, verifier = await get_code(authz.http, client["client_id"])
    r = await redeem(
        authz.http, client["client_id"], code, verifier, resource="https://x.example/mcp"
    )
    assert_error(r, "invalid_target")
    r = await redeem(authz.http, client["client_id"], code, verifier)  # the code survived
    assert r.status_code == 200
    assert authz.verifier().verify(r.json()["access_token"])["aud"] == RESOURCE


async def test_a_refresh_may_narrow_the_access_token_but_the_grant_keeps_its_scope(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    code, verifier = await get_code(authz.http, client["client_id"])
    first = (await redeem(authz.http, client["client_id"], code, verifier)).json()
    data = {"grant_type": "refresh_token", "client_id": client["client_id"]}
    narrow = await authz.http.post(
        "/token", data={**data, "refresh_token": first["refresh_token"], "scope": "apps:read"}
    )
    assert narrow.json()["scope"] == "apps:read"
    wide = await authz.http.post(
        "/token", data={**data, "refresh_token": narrow.json()["refresh_token"]}
    )
    assert wide.json()["scope"] == first["scope"]
    foreign = await authz.http.post(
        "/token", data={**data, "refresh_token": wide.json()["refresh_token"], "scope": "openid"}
    )
    assert_error(foreign, "invalid_scope")
    still = await authz.http.post(
        "/token", data={**data, "refresh_token": wide.json()["refresh_token"]}
    )
    assert still.status_code == 200  # a refused request does not spend the refresh token


async def test_a_refresh_token_is_bound_to_its_client_and_expires(authz: OAuthWorld) -> None:
    mine = await register(authz.http)
    theirs = await register(authz.http)
    code, verifier = await get_code(authz.http, mine["client_id"])
    token = (await redeem(authz.http, mine["client_id"], code, verifier)).json()
    stolen = await authz.http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": token["refresh_token"],
            "client_id": theirs["client_id"],
        },
    )
    assert_error(stolen, "invalid_grant")
    assert authz.revoked == []  # a confused client does not end the owner's grant
    authz.clock.offset += 31 * 86400
    late = await authz.http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": token["refresh_token"],
            "client_id": mine["client_id"],
        },
    )
    assert_error(late, "invalid_grant")


async def test_a_confidential_client_authenticates_by_basic_or_post(authz: OAuthWorld) -> None:
    client = await register(authz.http, token_endpoint_auth_method="client_secret_basic")
    cid, secret = client["client_id"], client["client_secret"]
    assert client["client_secret_expires_at"] == 0
    code, verifier = await get_code(authz.http, cid)
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "redirect_uri": "http://127.0.0.1:33418/",
    }
    r = await authz.http.post("/token", data=data, headers=basic(cid, secret))
    assert r.status_code == 200, r.text
    code, verifier = await get_code(authz.http, cid)
    r = await authz.http.post(
        "/token",
        data={
            **data,
            "code": code,
            "code_verifier": verifier,
            "client_id": cid,
            "client_secret": secret,
        },
    )
    assert r.status_code == 200, r.text


async def test_a_confidential_client_without_its_secret_is_refused(authz: OAuthWorld) -> None:
    client = await register(authz.http, token_endpoint_auth_method="client_secret_post")
    cid = client["client_id"]
    code, verifier = await get_code(authz.http, cid)
    r = await redeem(authz.http, cid, code, verifier)
    assert_error(r, "invalid_client", 401)
    r = await authz.http.post(
        "/token", data={"grant_type": "client_credentials"}, headers=basic(cid, "wrong")
    )
    assert_error(r, "invalid_client", 401)
    assert r.headers["www-authenticate"].startswith("Basic")


async def test_client_credentials_work_for_a_machine_client(authz: OAuthWorld) -> None:
    cid, secret = await authz.server.create_machine_client(
        "acme", "ci bot", {"apps:read", "deploy:read"}
    )
    r = await authz.http.post(
        "/token", data={"grant_type": "client_credentials"}, headers=basic(cid, secret)
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert "refresh_token" not in body
    assert body["scope"] == "apps:read deploy:read"
    claims = authz.verifier().verify(body["access_token"])
    assert claims["tid"] == "acme"
    assert claims["sub"] == f"client:{cid}"
    narrowed = await authz.http.post(
        "/token",
        data={
            "grant_type": "client_credentials",
            "scope": "apps:read",
            "client_id": cid,
            "client_secret": secret,
        },
    )
    assert narrowed.json()["scope"] == "apps:read"
    wider = await authz.http.post(
        "/token",
        data={"grant_type": "client_credentials", "scope": "apps:write"},
        headers=basic(cid, secret),
    )
    assert_error(wider, "invalid_scope")
    code = await authz.http.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": "x",
            "code_verifier": "A" * 43,
            "redirect_uri": "x",
        },
        headers=basic(cid, secret),
    )
    assert_error(code, "unauthorized_client")


async def test_client_credentials_are_refused_to_public_and_registered_clients(
    authz: OAuthWorld,
) -> None:
    public = await register(authz.http)
    r = await authz.http.post(
        "/token", data={"grant_type": "client_credentials", "client_id": public["client_id"]}
    )
    assert_error(r, "unauthorized_client")
    confidential = await register(
        authz.http,
        token_endpoint_auth_method="client_secret_basic",
        grant_types=["authorization_code", "client_credentials"],
    )
    assert confidential["grant_types"] == ["authorization_code"]
    r = await authz.http.post(
        "/token",
        data={"grant_type": "client_credentials"},
        headers=basic(confidential["client_id"], confidential["client_secret"]),
    )
    assert_error(r, "unauthorized_client")


async def test_malformed_token_requests_are_refused_without_caching(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    cid = client["client_id"]
    assert_error(await authz.http.post("/token", data={"client_id": cid}), "invalid_request")
    assert_error(
        await authz.http.post("/token", data={"grant_type": "password", "client_id": cid}),
        "unsupported_grant_type",
    )
    assert_error(
        await authz.http.post("/token", json={"grant_type": "client_credentials"}),
        "invalid_request",
    )
    assert_error(
        await authz.http.post("/token", data={"grant_type": "refresh_token"}), "invalid_client", 401
    )
    doubled = await authz.http.post(
        "/token",
        content=f"grant_type=refresh_token&grant_type=password&client_id={cid}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert_error(doubled, "invalid_request")
    big = await authz.http.post(
        "/token",
        content=b"grant_type=" + b"x" * 20_000,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert big.status_code == 413
