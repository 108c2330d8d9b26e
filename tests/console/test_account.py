"""The account page: a user's tokens, grants and sessions, and revoking each from the console
exactly as the rest of the server revokes them (one click, a confirmation, a CSRF-checked POST,
an audit row); nobody else's, and no other tenant's."""

from __future__ import annotations

import asyncio
import re

import httpx

from appdeck.auth import scopes
from appdeck.console.render import cap
from tests.auth.server.helpers import authorize_url, parse_consent, pkce_pair, post_form, query_of
from tests.console.conftest import PASSWORD, Browser, ConsoleWorld, csrf
from tests.support.mcp import headers, initialize, request

ALL = scopes.render(set(scopes.ALL))
REDIRECT = "http://127.0.0.1:33418/"


async def _pat(world: ConsoleWorld, user: str, name: str = "laptop") -> tuple[str, str]:
    token, record = await world.admin.create_pat("acme", user, ALL, name=name)
    return token, record.id


async def _call(world: ConsoleWorld, token: str, session: str | None = None) -> httpx.Response:
    client = world.browser().client
    return await client.post(
        "/mcp",
        json=request("tools/call", {"name": "list_apps", "arguments": {}}),
        headers=headers(session, token),
    )


async def _opens(world: ConsoleWorld, token: str) -> int:
    """The status of an ``initialize`` with ``token`` (200: it works; 401: refused)."""
    client = world.browser().client
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    }
    answer = await client.post(
        "/mcp", json=request("initialize", params), headers=headers(None, token)
    )
    return answer.status_code


async def _revoke(browser: Browser, kind: str, target: str) -> httpx.Response:
    """Open the confirmation page (as the account page's link does), then confirm."""
    path = f"/console/account/revoke/{kind}?id={target}"
    return await browser.post_form(
        path, f"/console/account/revoke/{kind}", id=target, confirm="yes"
    )


async def _audited(world: ConsoleWorld, action: str) -> list[dict[str, object]]:
    for _ in range(200):  # the audit writer is a thread of its own: bounded wait
        rows = await world.services.audit_store.tail(200)
        found = [r for r in rows if r["event"] == "console_action" and r["action"] == action]
        if found:
            return found
        await asyncio.sleep(0.02)
    return []


async def test_the_account_page_lists_a_pat_without_its_secret(world: ConsoleWorld) -> None:
    token, pat_id = await _pat(world, "bob", name="ci <script>")
    bob = world.browser()
    await bob.sign_in("bob")
    page = await bob.get("/console/account")
    assert page.status_code == 200
    assert "ci &lt;script&gt;" in page.text
    assert "<script>" not in page.text.replace('<script src="/console/static/console.js"', "")
    assert token not in page.text
    assert f"/console/account/revoke/token?id={pat_id}" in page.text
    assert "tenant role <strong>member</strong>" in page.text


async def test_a_pat_revoked_in_the_console_stops_working_for_mcp_at_once(
    world: ConsoleWorld,
) -> None:
    token, pat_id = await _pat(world, "bob")
    session = await initialize(world.browser().client, token)
    assert (await _call(world, token, session)).status_code == 200  # cached as valid
    bob = world.browser()
    await bob.sign_in("bob")
    confirm = await bob.get(f"/console/account/revoke/token?id={pat_id}")
    assert confirm.status_code == 200
    assert "laptop" in confirm.text
    answer = await _revoke(bob, "token", pat_id)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/account?done=token"
    assert (await _call(world, token, session)).status_code == 401
    assert await _opens(world, token) == 401
    done = await bob.get("/console/account?done=token")
    assert "Token revoked." in done.text
    assert pat_id not in done.text
    [row] = await _audited(world, "token.revoke")
    assert row["user_id"] is not None
    assert row["detail"] == {"pat_id": pat_id}


async def test_someone_elses_pat_is_a_404_to_view_and_to_revoke(world: ConsoleWorld) -> None:
    token, pat_id = await _pat(world, "bob")
    carol = world.browser()
    await carol.sign_in("carol")
    assert pat_id not in (await carol.get("/console/account")).text
    assert (await carol.get(f"/console/account/revoke/token?id={pat_id}")).status_code == 404
    answer = await _revoke_without_confirm_page(carol, "token", pat_id)
    assert answer.status_code == 404
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")  # a tenant admin, of another tenant
    assert (await eve.get(f"/console/account/revoke/token?id={pat_id}")).status_code == 404
    assert (await _revoke_without_confirm_page(eve, "token", pat_id)).status_code == 404
    assert await _opens(world, token) == 200


async def test_a_tenant_admin_cannot_revoke_a_members_pat_either(world: ConsoleWorld) -> None:
    token, pat_id = await _pat(world, "bob")
    alice = world.browser()
    await alice.sign_in("alice")
    assert (await _revoke_without_confirm_page(alice, "token", pat_id)).status_code == 404
    assert await _opens(world, token) == 200


async def _revoke_without_confirm_page(browser: Browser, kind: str, target: str) -> httpx.Response:
    """A forged POST: the viewer's own CSRF token (from their account page), someone's id."""
    return await browser.post_form(
        "/console/account", f"/console/account/revoke/{kind}", id=target, confirm="yes"
    )


async def test_the_revoke_post_without_csrf_is_refused(world: ConsoleWorld) -> None:
    token, pat_id = await _pat(world, "bob")
    bob = world.browser()
    await bob.sign_in("bob")
    answer = await bob.client.post(
        "/console/account/revoke/token", data={"id": pat_id, "confirm": "yes", "csrf": "x"}
    )
    assert answer.status_code == 403
    answer = await bob.client.post(
        "/console/account/revoke/token", data={"id": pat_id, "confirm": "yes"}
    )
    assert answer.status_code == 403
    assert await _opens(world, token) == 200


async def test_an_unconfirmed_or_unknown_revocation_is_refused(world: ConsoleWorld) -> None:
    _, pat_id = await _pat(world, "bob")
    bob = world.browser()
    await bob.sign_in("bob")
    unconfirmed = await bob.post_form(
        "/console/account", "/console/account/revoke/token", id=pat_id
    )
    assert unconfirmed.status_code == 400
    for path in [
        "/console/account/revoke/nothing?id=1",
        "/console/account/revoke/token",
        "/console/account/revoke/token?id=" + "9" * 5000,
        "/console/account/revoke/token?id=%00",
        "/console/account/revoke/grant?id=%F0%9F%92%A5",
        "/console/account/revoke/mcp-session?id=-1",
        "/console/account/revoke/console-session?id=" + str(2**63),
    ]:
        assert (await bob.get(path)).status_code == 404, path


async def _grant(world: ConsoleWorld, user: str) -> tuple[str, str, str]:
    """A real grant: a public client registers, ``user`` consents; (client id, refresh token,
    access token)."""
    http = world.browser().client
    registered = await http.post(
        "/register",
        json={
            "client_name": "Laptop agent",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        },
    )
    assert registered.status_code == 201, registered.text
    client_id = str(registered.json()["client_id"])
    resource = f"{world.base_url}/mcp"
    verifier, challenge = pkce_pair()
    page = await http.get(
        authorize_url(client_id, challenge, redirect_uri=REDIRECT, resource=resource, scope=ALL)
    )
    assert page.status_code == 200, page.text
    answer = await post_form(http, parse_consent(page.text), username=user, password=PASSWORD)
    assert answer.status_code == 303, answer.text
    code = query_of(answer.headers["location"])["code"]
    tokens = await http.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "code_verifier": verifier,
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "resource": resource,
        },
    )
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    return client_id, str(body["refresh_token"]), str(body["access_token"])


async def _refresh(world: ConsoleWorld, client_id: str, refresh: str) -> httpx.Response:
    return await world.browser().client.post(
        "/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh, "client_id": client_id},
    )


async def test_a_grant_revoked_in_the_console_stops_its_refresh_token(
    world: ConsoleWorld,
) -> None:
    client_id, refresh, access = await _grant(world, "bob")
    assert await _opens(world, access) == 200
    bob = world.browser()
    await bob.sign_in("bob")
    page = await bob.get("/console/account")
    assert "Laptop agent" in page.text
    assert cap(client_id, 200) in page.text
    answer = await _revoke(bob, "grant", client_id)
    assert answer.status_code == 303
    refused = await _refresh(world, client_id, refresh)
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"
    assert await _opens(world, access) == 401  # its live access token too, at once
    assert "Laptop agent" not in (await bob.get("/console/account")).text
    [row] = await _audited(world, "grant.revoke")
    assert row["detail"] == {"client": client_id, "access_revoked": 1}


async def test_another_users_grant_is_a_404(world: ConsoleWorld) -> None:
    client_id, refresh, _ = await _grant(world, "bob")
    carol = world.browser()
    await carol.sign_in("carol")
    assert (await carol.get(f"/console/account/revoke/grant?id={client_id}")).status_code == 404
    assert (await _revoke_without_confirm_page(carol, "grant", client_id)).status_code == 404
    assert (await _refresh(world, client_id, refresh)).status_code == 200


async def test_an_mcp_session_ended_in_the_console_is_gone(world: ConsoleWorld) -> None:
    token, _ = await _pat(world, "bob")
    session = await initialize(world.browser().client, token)
    bob = world.browser()
    await bob.sign_in("bob")
    page = await bob.get("/console/account")
    assert "tests 1" in page.text  # the client's name and version
    assert f"/console/account/revoke/mcp-session?id={session}" in page.text
    answer = await _revoke(bob, "mcp-session", session)
    assert answer.status_code == 303
    assert (await _call(world, token, session)).status_code == 404
    assert await _opens(world, token) == 200  # the token itself still works
    [row] = await _audited(world, "mcp_session.end")
    assert row["detail"] == {"session": session[:12]}


async def test_another_users_mcp_session_is_a_404_and_lives_on(world: ConsoleWorld) -> None:
    token, _ = await _pat(world, "bob")
    session = await initialize(world.browser().client, token)
    for user, tenant in (("alice", "acme"), ("eve", "globex")):
        other = world.browser()
        await other.sign_in(user, tenant=tenant)
        assert session not in (await other.get("/console/account")).text
        assert (
            await _revoke_without_confirm_page(other, "mcp-session", session)
        ).status_code == 404
    assert (await _call(world, token, session)).status_code == 200


async def test_a_console_session_revoked_from_another_browser_signs_that_one_out(
    world: ConsoleWorld,
) -> None:
    laptop, phone = world.browser(), world.browser()
    await laptop.sign_in("bob")
    await phone.sign_in("bob")
    page = await laptop.get("/console/account")
    ids = re.findall(r"/console/account/revoke/console-session\?id=([\w-]+)", page.text)
    assert len(ids) == 2
    assert page.text.count("this browser</strong>") == 1
    current = re.search(r'revoke/console-session\?id=([\w-]+)">Sign out this browser', page.text)
    assert current is not None
    [other] = [i for i in ids if i != current.group(1)]
    answer = await _revoke(laptop, "console-session", other)
    assert answer.status_code == 303
    gone = await phone.get("/console/account")
    assert gone.status_code == 303
    assert gone.headers["location"].startswith("/console/signin")
    assert (await laptop.get("/console/account")).status_code == 200
    assert await _audited(world, "console_session.revoke")


async def test_revoking_this_browsers_own_session_signs_it_out(world: ConsoleWorld) -> None:
    bob = world.browser()
    await bob.sign_in("bob")
    page = await bob.get("/console/account")
    current = re.search(r'revoke/console-session\?id=([\w-]+)">Sign out this browser', page.text)
    assert current is not None
    answer = await _revoke(bob, "console-session", current.group(1))
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/signin"
    assert (await bob.get("/console/account")).status_code == 303


async def test_another_users_console_session_is_a_404(world: ConsoleWorld) -> None:
    bob, alice = world.browser(), world.browser()
    await bob.sign_in("bob")
    await alice.sign_in("alice")
    page = await bob.get("/console/account")
    [bobs] = re.findall(r"/console/account/revoke/console-session\?id=([\w-]+)", page.text)
    assert (await _revoke_without_confirm_page(alice, "console-session", bobs)).status_code == 404
    assert (await bob.get("/console/account")).status_code == 200


async def test_the_navigation_links_the_account_tenant_and_audit_pages(
    world: ConsoleWorld,
) -> None:
    bob = world.browser()
    await bob.sign_in("bob")
    page = await bob.get("/console/account")
    for path in ("/console/account", "/console/tenant", "/console/audit"):
        assert f'href="{path}"' in page.text
    assert 'href="/console/account" aria-current="page"' in page.text


def test_cap_cuts_long_text_with_an_ellipsis() -> None:
    assert cap("a" * 10, 5) == "aaaa…"
    assert cap(None) == ""
    assert cap("short") == "short"


async def test_the_confirmation_page_carries_the_id_and_the_csrf_token(world: ConsoleWorld) -> None:
    _, pat_id = await _pat(world, "bob")
    bob = world.browser()
    await bob.sign_in("bob")
    confirm = await bob.get(f"/console/account/revoke/token?id={pat_id}")
    assert csrf(confirm)
    assert f'name="id" value="{pat_id}"' in confirm.text
