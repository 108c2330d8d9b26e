"""GET/POST /authorize: what is checked before the redirect URI is trusted (an error page),
after (an error redirect), and the sign-in + consent form itself."""

from __future__ import annotations

import re

import sqlalchemy as sa

from appdeck.auth.scopes import SCOPES
from appdeck.auth.server.authorize import BAD_LOGIN
from appdeck.storage.schema import users

from .conftest import ISSUER, REDIRECT, OAuthWorld
from .helpers import (
    authorize_url,
    parse_consent,
    pkce_pair,
    post_form,
    query_of,
    redeem,
    register,
    sign_in,
)


async def test_the_consent_page_lists_each_requested_scope_checked_with_its_description(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http, client_name="VS Code")
    _, challenge = pkce_pair()
    page = await authz.http.get(
        authorize_url(client["client_id"], challenge, scope="apps:read deploy:write")
    )
    assert page.status_code == 200
    form = parse_consent(page.text)
    assert form.scopes == {"apps:read": True, "deploy:write": True}
    assert "Deploy, roll back and restart apps" in page.text
    assert form.action == f"{ISSUER}/authorize"
    assert set(form.hidden) == {"pending", "csrf"}
    assert form.text_fields["tenant"] == ""  # typed by the user, never listed
    assert "VS Code" in page.text
    assert "127.0.0.1" in page.text
    assert list(form.buttons) == ["allow", "deny"]  # Enter submits the first: Allow


async def test_the_consent_page_is_locked_down_against_framing_and_injection(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge))
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "script-src" not in csp  # nothing runs
    assert "form-action 'self' http://127.0.0.1:33418 http://127.0.0.1:8080" in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    cookie = page.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "<script" not in page.text
    assert "http://" not in page.text.split("<body>")[0]


async def test_the_consent_page_escapes_a_malicious_client_name(authz: OAuthWorld) -> None:
    evil = "<script>alert('x')</script><img src=x onerror=alert(1)>\"'&"
    client = await register(authz.http, client_name=evil)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge))
    assert page.status_code == 200
    assert "<script>" not in page.text
    assert "<img" not in page.text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page.text
    assert "&quot;&#x27;&amp;" in page.text
    assert "cannot vouch for its name" in page.text  # self-registered clients are flagged


async def test_no_tenant_is_listed_to_an_anonymous_visitor(authz: OAuthWorld) -> None:
    await authz.identities.create_tenant("zeta-holdings", "Zeta <Ltd>")
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge))
    form = parse_consent(page.text)
    assert form.tenant_options == []
    # whole words only: the page's random tokens may hold any 4 letters ("...memzetaw...")
    text = page.text.lower()
    assert "zeta-holdings" not in text
    assert "zeta &lt;ltd&gt;" not in text
    assert re.search(r"\bacme\b", text) is None


async def test_an_unregistered_redirect_uri_gets_an_error_page_and_no_redirect(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    for uri in ("https://evil.example/cb", "http://127.0.0.1:33418/other", "http://localhost/"):
        page = await authz.http.get(authorize_url(client["client_id"], challenge, redirect_uri=uri))
        assert page.status_code == 400, uri
        assert "location" not in page.headers
        assert "not registered" in page.text


async def test_a_loopback_redirect_uri_matches_on_any_port(authz: OAuthWorld) -> None:
    client = await register(authz.http, redirect_uris=["http://127.0.0.1:33418"])
    verifier, challenge = pkce_pair()
    page = await authz.http.get(
        authorize_url(client["client_id"], challenge, redirect_uri="http://127.0.0.1:50123/")
    )
    assert page.status_code == 200
    r = await post_form(authz.http, parse_consent(page.text))
    assert r.headers["location"].startswith("http://127.0.0.1:50123/?code=")
    code = query_of(r.headers["location"])["code"]
    token = await redeem(
        authz.http, client["client_id"], code, verifier, redirect_uri="http://127.0.0.1:50123/"
    )
    assert token.status_code == 200, token.text


async def test_an_unknown_client_or_a_repeated_parameter_gets_an_error_page(
    authz: OAuthWorld,
) -> None:
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url("no-such-client", challenge))
    assert page.status_code == 400
    assert "not registered" in page.text
    client = await register(authz.http)
    doubled = authorize_url(client["client_id"], challenge) + "&client_id=other"
    page = await authz.http.get(doubled)
    assert page.status_code == 400
    assert "repeated" in page.text
    page = await authz.http.get(authorize_url(client["client_id"], challenge, redirect_uri=None))
    assert page.status_code == 400
    assert "redirect_uri" in page.text


async def test_plain_or_missing_pkce_is_refused_back_to_the_client(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    verifier, challenge = pkce_pair()
    cases = [
        {"code_challenge_method": "plain", "code_challenge": verifier[:43]},
        {"code_challenge_method": None},
        {"code_challenge": None},
        {"code_challenge": "short"},
    ]
    for params in cases:
        r = await authz.http.get(authorize_url(client["client_id"], challenge, **params))
        assert r.status_code == 302, params
        back = query_of(r.headers["location"])
        assert back["error"] == "invalid_request", params
        assert back["state"] == "st-123"
        assert back["iss"] == ISSUER
        assert r.headers["location"].startswith(REDIRECT)


async def test_a_foreign_resource_is_refused_with_invalid_target(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    r = await authz.http.get(
        authorize_url(client["client_id"], challenge, resource="https://other.example/mcp")
    )
    assert query_of(r.headers["location"])["error"] == "invalid_target"
    ok = await authz.http.get(
        authorize_url(client["client_id"], challenge, resource="HTTP://127.0.0.1:8080/mcp/")
    )
    assert ok.status_code == 200  # case of scheme/host and a trailing slash do not matter


async def test_an_unsupported_response_type_is_refused(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    r = await authz.http.get(authorize_url(client["client_id"], challenge, response_type="token"))
    assert query_of(r.headers["location"])["error"] == "unsupported_response_type"


async def test_unknown_scopes_are_ignored_and_with_none_known_every_scope_is_offered(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http, scope="claudeai")
    assert "scope" not in client  # nothing AppDeck knows was registered
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge, scope="claudeai"))
    assert len(parse_consent(page.text).scopes) == len(SCOPES)
    page = await authz.http.get(
        authorize_url(client["client_id"], challenge, scope="openid apps:read")
    )
    assert parse_consent(page.text).scopes == {"apps:read": True}


async def test_a_wrong_password_unknown_user_and_unknown_tenant_read_the_same(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    pages = [
        await sign_in(authz.http, client["client_id"], challenge, password="wrong"),
        await sign_in(authz.http, client["client_id"], challenge, username="nobody"),
        await sign_in(authz.http, client["client_id"], challenge, tenant="nowhere"),
    ]
    for page in pages:
        assert page.status_code == 200
        assert "location" not in page.headers
        assert BAD_LOGIN in page.text
    errors = {p.text.split("role=alert>")[1].split("<")[0] for p in pages}
    assert errors == {BAD_LOGIN}


async def test_a_disabled_user_cannot_sign_in(authz: OAuthWorld) -> None:
    async with authz.engine.begin() as conn:
        await conn.execute(
            sa.update(users).where(users.c.id == authz.user.id).values(disabled=True)
        )
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await sign_in(authz.http, client["client_id"], challenge)
    assert page.status_code == 200
    assert BAD_LOGIN in page.text


async def test_five_wrong_passwords_end_the_request(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge))
    form = parse_consent(page.text)
    statuses = [(await post_form(authz.http, form, password="nope")).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 200, 429]
    r = await post_form(authz.http, form)  # even the right password: the request is gone
    assert r.status_code == 400
    assert "expired" in r.text


async def test_deny_sends_access_denied_back_to_the_client(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    r = await sign_in(authz.http, client["client_id"], challenge, decision="deny", password="")
    assert r.status_code == 303
    back = query_of(r.headers["location"])
    assert back == {
        "error": "access_denied",
        "error_description": "the user denied the request",
        "state": "st-123",
        "iss": ISSUER,
    }


async def test_unticking_every_scope_asks_again(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge, scope="apps:read"))
    form = parse_consent(page.text)
    r = await post_form(authz.http, form, untick=frozenset({"apps:read"}))
    assert r.status_code == 200
    assert "Choose at least one permission" in r.text
    again = parse_consent(r.text)
    assert again.scopes == {"apps:read": False}
    r = await post_form(
        authz.http, again.__class__(**{**again.__dict__, "scopes": {"apps:read": True}})
    )
    assert r.status_code == 303


async def test_a_scope_the_client_did_not_ask_for_cannot_be_added_in_the_form(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge, scope="apps:read"))
    form = parse_consent(page.text)
    form.scopes["apps:write"] = True
    r = await post_form(authz.http, form)
    assert r.status_code == 400
    assert "location" not in r.headers


async def test_a_post_without_the_csrf_token_or_the_browser_cookie_is_refused(
    authz: OAuthWorld,
) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge))
    form = parse_consent(page.text)
    good_csrf = form.hidden["csrf"]
    form.hidden["csrf"] = "x" * len(good_csrf)
    assert (await post_form(authz.http, form)).status_code == 403
    form.hidden["csrf"] = good_csrf
    authz.http.cookies.clear()  # another browser posting the same form
    assert (await post_form(authz.http, form)).status_code == 403


async def test_a_pending_request_expires_after_ten_minutes(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client["client_id"], challenge))
    authz.clock.offset += 601
    r = await post_form(authz.http, parse_consent(page.text))
    assert r.status_code == 400
    assert "expired" in r.text


async def test_the_authorize_form_refuses_oversized_bodies(authz: OAuthWorld) -> None:
    r = await authz.http.post(
        "/authorize",
        content=b"a=" + b"x" * 20_000,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 413
