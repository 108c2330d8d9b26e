"""The whole journey of an MCP client, driven by Authlib's OAuth client: registration,
consent with a scope unticked, code with PKCE, refresh rotation and reuse detection,
revocation."""

from __future__ import annotations

import pytest
from authlib.common.security import generate_token
from authlib.integrations.base_client.errors import OAuthError as AuthlibOAuthError

from appdeck.auth.tokens import InvalidToken, TokenVerifier

from .conftest import ISSUER, RESOURCE, OAuthWorld
from .helpers import ALL_SCOPES, get_code, parse_consent, post_form, query_of, redeem, register


async def test_a_registered_client_signs_in_refreshes_and_revokes_with_authlib(
    authz: OAuthWorld,
) -> None:
    registered = await register(authz.http, client_name="VS Code")
    async with authz.oauth_client(registered["client_id"], scope=ALL_SCOPES) as oc:
        verifier = generate_token(64)
        url, state = oc.create_authorization_url(
            f"{ISSUER}/authorize", code_verifier=verifier, resource=RESOURCE
        )
        page = await oc.request("GET", url, withhold_token=True)
        assert page.status_code == 200
        form = parse_consent(page.text)
        assert set(form.scopes) == set(ALL_SCOPES.split())
        assert all(form.scopes.values())

        answer = await post_form(oc, form, untick=frozenset({"deploy:write"}))
        assert answer.status_code == 303
        location = answer.headers["location"]
        assert location.startswith("http://127.0.0.1:33418/?")
        params = query_of(location)
        assert params["state"] == state
        assert params["iss"] == ISSUER
        assert params["code"]

        token = await oc.fetch_token(
            f"{ISSUER}/token",
            authorization_response=location,
            code_verifier=verifier,
            resource=RESOURCE,
        )
        narrowed = set(ALL_SCOPES.split()) - {"deploy:write"}
        assert token["token_type"].lower() == "bearer"
        assert set(token["scope"].split()) == narrowed
        claims = authz.verifier().verify(token["access_token"])
        assert claims["tid"] == "acme"
        assert claims["sub"] == authz.user.id
        assert claims["client_id"] == registered["client_id"]
        assert claims["aud"] == RESOURCE
        assert set(claims["scope"].split()) == narrowed

        old_refresh = token["refresh_token"]
        rotated = await oc.refresh_token(f"{ISSUER}/token", refresh_token=old_refresh)
        assert rotated["refresh_token"] != old_refresh
        assert set(rotated["scope"].split()) == narrowed  # never more than the user allowed

        with pytest.raises(AuthlibOAuthError) as replay:
            await oc.refresh_token(f"{ISSUER}/token", refresh_token=old_refresh)
        assert replay.value.error == "invalid_grant"
        with pytest.raises(AuthlibOAuthError) as family:
            await oc.refresh_token(f"{ISSUER}/token", refresh_token=rotated["refresh_token"])
        assert family.value.error == "invalid_grant"
        revoked_by_reuse = {jti for jti, _ in authz.revoked}
        first_jti = claims["jti"]
        second_jti = authz.verifier().verify(rotated["access_token"])["jti"]
        assert {first_jti, second_jti} <= revoked_by_reuse  # the family's access tokens too

        authz.revoked.clear()
        r = await oc.revoke_token(
            f"{ISSUER}/revoke", token=rotated["access_token"], token_type_hint="access_token"
        )
        assert r.status_code == 200
        assert [jti for jti, _ in authz.revoked] == [second_jti]
        assert authz.revoked[0][1] == pytest.approx(
            authz.verifier().verify(rotated["access_token"])["exp"]
        )


async def test_revoking_a_refresh_token_ends_the_grant_and_its_access_tokens(
    authz: OAuthWorld,
) -> None:
    registered = await register(authz.http)
    async with authz.oauth_client(registered["client_id"], scope=ALL_SCOPES) as oc:
        verifier = generate_token(64)
        url, _ = oc.create_authorization_url(
            f"{ISSUER}/authorize", code_verifier=verifier, resource=RESOURCE
        )
        form = parse_consent((await oc.request("GET", url, withhold_token=True)).text)
        location = (await post_form(oc, form)).headers["location"]
        token = await oc.fetch_token(
            f"{ISSUER}/token", authorization_response=location, code_verifier=verifier
        )
        r = await oc.revoke_token(f"{ISSUER}/revoke", token=token["refresh_token"])
        assert r.status_code == 200
        jti = authz.verifier().verify(token["access_token"])["jti"]
        assert [j for j, _ in authz.revoked] == [jti]
        with pytest.raises(AuthlibOAuthError) as refused:
            await oc.refresh_token(f"{ISSUER}/token", refresh_token=token["refresh_token"])
        assert refused.value.error == "invalid_grant"


async def test_an_access_token_for_another_audience_does_not_verify(authz: OAuthWorld) -> None:
    registered = await register(authz.http)
    code, verifier = await get_code(authz.http, registered["client_id"])
    token = (await redeem(authz.http, registered["client_id"], code, verifier)).json()
    elsewhere = TokenVerifier(authz.keys.public_set, ISSUER, "https://other.example/mcp", ["ES256"])
    with pytest.raises(InvalidToken):
        elsewhere.verify(token["access_token"])
