"""The sign-in page a newcomer meets: Enter allows, the tenant is typed and remembered, the
step-up page shows what was granted and what is new, and the spelling of the URL is kept."""

from __future__ import annotations

import httpx

from appdeck.auth.urls import PublicUrls

from .conftest import REDIRECT, OAuthWorld, WorldFactory
from .helpers import authorize_url, parse_consent, pkce_pair, post_form, query_of, redeem, register


async def _granted(authz: OAuthWorld, client_id: str, scope: str) -> None:
    """Sign in through the page for ``scope`` and redeem the code: a live grant."""
    verifier, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client_id, challenge, scope=scope))
    assert "asks for more access" not in page.text
    answer = await post_form(authz.http, parse_consent(page.text))
    assert answer.status_code == 303, answer.text
    code = query_of(answer.headers["location"])["code"]
    assert (await redeem(authz.http, client_id, code, verifier)).status_code == 200


async def test_allow_is_the_first_submit_button_so_enter_allows(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge))
    form = parse_consent(page.text)
    assert list(form.buttons.items()) == [("allow", "Allow"), ("deny", "Deny")]
    # Deny is still there, and skips the required fields
    assert "value=deny formnovalidate" in page.text


async def test_the_tenant_signed_in_with_is_remembered_in_a_lax_httponly_cookie(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    await _granted(authz, client["client_id"], "apps:read")
    cookie = next(c for c in authz.http.cookies.jar if c.name == "appdeck_tenant")
    assert (cookie.value, cookie.path) == ("acme", "/authorize")
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert str(cookie.get_nonstandard_attr("SameSite")).lower() == "lax"
    other = await register(authz.http)  # another client: a first sign-in, tenant prefilled
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(other["client_id"], challenge))
    form = parse_consent(page.text)
    assert form.text_fields["tenant"] == "acme"
    assert form.text_fields["username"] == ""
    assert "asks for more access" not in page.text


async def test_a_forged_tenant_cookie_is_ignored(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    for forged in ('acme"><b>x', "acme/x", "a" * 300):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=authz.app),
            base_url="http://127.0.0.1:8080",
            cookies={"appdeck_tenant": forged},
        ) as http:
            _, challenge = pkce_pair()
            page = await http.get(authorize_url(client["client_id"], challenge))
        assert parse_consent(page.text).text_fields["tenant"] == "", forged
        assert "<b>" not in page.text


async def test_asking_again_for_more_scopes_shows_the_step_up_page(authz: OAuthWorld) -> None:
    client = await register(authz.http, client_name="Deployer")
    await _granted(authz, client["client_id"], "apps:read")
    _, challenge = pkce_pair()
    page = await authz.http.get(
        authorize_url(client["client_id"], challenge, scope="apps:read deploy:write")
    )
    assert "<h1>Deployer asks for more access</h1>" in page.text
    assert "You already allowed Deployer to:</p><ul><li><code>apps:read</code>" in page.text
    assert "1 more permission," in page.text
    assert '<label class=new><input type=checkbox name=scope value="deploy:write"' in page.text
    assert '<label><input type=checkbox name=scope value="apps:read"' in page.text
    form = parse_consent(page.text)
    assert (form.text_fields["tenant"], form.text_fields["username"]) == ("acme", "ada")
    answer = await post_form(authz.http, form)
    assert answer.status_code == 303
    assert "code=" in answer.headers["location"]


async def test_another_browser_gets_the_first_sign_in_page_for_the_same_client(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    await _granted(authz, client["client_id"], "apps:read")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=authz.app), base_url="http://127.0.0.1:8080"
    ) as stranger:
        _, challenge = pkce_pair()
        page = await stranger.get(
            authorize_url(client["client_id"], challenge, scope="apps:read deploy:write")
        )
    assert "asks for more access" not in page.text
    assert "already allowed" not in page.text
    assert parse_consent(page.text).text_fields["username"] == ""


async def test_a_code_challenge_with_a_trailing_newline_is_refused(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    r = await authz.http.get(authorize_url(client["client_id"], challenge + "\n"))
    assert r.status_code == 302
    assert r.headers["location"].startswith(REDIRECT)
    assert query_of(r.headers["location"])["error"] == "invalid_request"


async def test_the_form_posts_back_to_the_spelling_the_browser_used(
    make_world: WorldFactory,
) -> None:
    authz = await make_world(urls=PublicUrls.build("http://127.0.0.1:8080", loopback_aliases=True))
    client = await register(authz.http)
    verifier, challenge = pkce_pair()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=authz.app), base_url="http://localhost:8080"
    ) as browser:
        page = await browser.get(authorize_url(client["client_id"], challenge))
        form = parse_consent(page.text)
        assert form.action == "http://localhost:8080/authorize"
        assert (
            "form-action 'self' http://127.0.0.1:33418 http://localhost:8080"
            in (page.headers["content-security-policy"])
        )
        answer = await post_form(browser, form)
    params = query_of(answer.headers["location"])
    assert params["iss"] == "http://localhost:8080"
    token = await redeem(
        authz.http, client["client_id"], params["code"], verifier, resource="http://[::1]:8080/mcp"
    )
    assert token.status_code == 200, token.text
    claims = authz.verifier().verify(token.json()["access_token"])  # the canonical names
    assert (claims["iss"], claims["aud"]) == ("http://127.0.0.1:8080", "http://127.0.0.1:8080/mcp")
