"""Sign-in attempts per account and per client IP, and registrations per IP, are limited; a
fresh /authorize no longer gives five more tries."""

from __future__ import annotations

import logging

import httpx
import pytest

from appdeck import activity
from tests.auth.server.conftest import ISSUER, PASSWORD, OAuthWorld
from tests.auth.server.helpers import (
    authorize_url,
    parse_consent,
    pkce_pair,
    post_form,
    register,
)


async def _form(http: httpx.AsyncClient, client_id: str):  # type: ignore[no-untyped-def]
    _, challenge = pkce_pair()
    page = await http.get(authorize_url(client_id, challenge))
    assert page.status_code == 200, page.text
    return parse_consent(page.text)


def _from(authz: OAuthWorld, ip: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=authz.app, client=(ip, 5000))
    return httpx.AsyncClient(transport=transport, base_url=ISSUER)


async def test_a_fresh_authorize_request_gives_no_fresh_tries_and_the_wait_grows(
    authz: OAuthWorld,
) -> None:
    client = (await register(authz.http))["client_id"]
    first = await _form(authz.http, client)
    for _ in range(5):
        await post_form(authz.http, first, password="nope")  # the 5th ends that request
    second = await _form(authz.http, client)
    r = await post_form(authz.http, second, password="nope")  # the 6th failure: 1 s wait
    assert r.status_code == 200
    r = await post_form(authz.http, second)  # even the right password waits
    assert r.status_code == 429
    assert "Try again in 1 seconds" in r.text
    authz.clock.offset += 1.5
    r = await post_form(authz.http, second, password="still wrong")  # the 7th: 2 s
    r = await post_form(authz.http, second, password=PASSWORD)
    assert r.status_code == 429
    assert "Try again in 2 seconds" in r.text
    authz.clock.offset += 2.5
    r = await post_form(authz.http, second, password=PASSWORD)
    assert r.status_code == 303  # waited long enough: signed in


async def test_the_account_waits_whichever_address_tries_it(authz: OAuthWorld) -> None:
    client = (await register(authz.http))["client_id"]
    for n in range(6):
        async with _from(authz, f"10.0.0.{n}") as http:
            await post_form(http, await _form(http, client), password="nope")
    async with _from(authz, "10.0.1.1") as http:
        r = await post_form(http, await _form(http, client))
        assert r.status_code == 429
        other = await post_form(http, await _form(http, client), username="nobody")
        assert other.status_code == 200  # another account from there may still try


async def test_an_address_trying_many_accounts_waits(authz: OAuthWorld) -> None:
    client = (await register(authz.http))["client_id"]
    for n in range(21):  # 20 free per address, each for another account
        form = await _form(authz.http, client)
        r = await post_form(authz.http, form, username=f"user{n}", password="nope")
        assert r.status_code == 200
    r = await post_form(authz.http, await _form(authz.http, client))
    assert r.status_code == 429  # even ada's right password, from this address
    async with _from(authz, "10.0.2.2") as http:
        r = await post_form(http, await _form(http, client))
        assert r.status_code == 303
    rows = [r for r in await authz.audit_rows() if r["event"] == "refused"]
    assert any(r["detail"]["reason"] == "sign_in_throttled" for r in rows)


async def test_registrations_per_address_are_limited(authz: OAuthWorld) -> None:
    limit = authz.server._ctx.settings.register_per_ip_per_hour
    for _ in range(limit):
        await register(authz.http)
    body = {"redirect_uris": ["http://127.0.0.1:1/"], "token_endpoint_auth_method": "none"}
    r = await authz.http.post("/register", json=body)
    assert r.status_code == 429
    assert r.json()["error"] == "temporarily_unavailable"
    assert int(r.headers["retry-after"]) >= 1
    async with _from(authz, "10.0.3.3") as http:
        assert (await http.post("/register", json=body)).status_code == 201


async def test_sign_ins_are_logged_one_line_each_and_a_success_clears_the_accounts_count(
    authz: OAuthWorld, caplog: pytest.LogCaptureFixture
) -> None:
    client = (await register(authz.http))["client_id"]
    with caplog.at_level(logging.INFO, logger=activity.log.name):
        for _ in range(4):  # four typos of five free ones
            await post_form(authz.http, await _form(authz.http, client), password="nope")
        r = await post_form(authz.http, await _form(authz.http, client))
        assert r.status_code == 303
        for _ in range(5):  # the count restarted at the success: five more are free
            r = await post_form(authz.http, await _form(authz.http, client), password="nope")
            assert r.status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sign-in ")]
    assert len(lines) == 10
    assert sum("outcome=ok" in line for line in lines) == 1
    assert all(PASSWORD not in line and "nope" not in line for line in lines)
    assert sum("reason=bad_credentials" in line for line in lines) == 9
