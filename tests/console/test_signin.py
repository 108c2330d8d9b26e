"""Signing in to the console and out, and what a browser without a session gets."""

from __future__ import annotations

from tests.console.conftest import PASSWORD, ConsoleWorld, csrf


async def test_a_page_without_a_session_sends_the_browser_to_sign_in(world: ConsoleWorld) -> None:
    page = await world.browser().get("/console/apps/1?offset=20")
    assert page.status_code == 303
    assert page.headers["location"] == "/console/signin?next=/console/apps/1%3Foffset%3D20"


async def test_signing_in_sets_an_httponly_lax_cookie_and_opens_the_overview(
    world: ConsoleWorld,
) -> None:
    browser = world.browser()
    form = await browser.get("/console/signin")
    answer = await browser.client.post(
        "/console/signin",
        data={"tenant": "acme", "username": "alice", "password": PASSWORD, "csrf": csrf(form)},
    )
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert "appdeck_console=cs_" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie
    assert "Path=/console" in cookie
    overview = await browser.get("/console")
    assert overview.status_code == 200
    assert "alice" in overview.text
    assert "script-src 'self'" in overview.headers["content-security-policy"]
    assert overview.headers["cache-control"] == "no-store"


async def test_a_wrong_password_is_refused_without_saying_which_part_was_wrong(
    world: ConsoleWorld,
) -> None:
    browser = world.browser()
    form = await browser.get("/console/signin")
    answer = await browser.client.post(
        "/console/signin",
        data={"tenant": "acme", "username": "alice", "password": "nope-nope", "csrf": csrf(form)},
    )
    assert answer.status_code == 401
    assert "Incorrect tenant, username or password." in answer.text
    assert "appdeck_console=" not in answer.headers.get("set-cookie", "")


async def test_the_sign_in_form_without_its_csrf_token_is_refused(world: ConsoleWorld) -> None:
    browser = world.browser()
    await browser.get("/console/signin")
    answer = await browser.client.post(
        "/console/signin",
        data={"tenant": "acme", "username": "alice", "password": PASSWORD, "csrf": "forged"},
    )
    assert answer.status_code == 403
    assert "appdeck_console=" not in answer.headers.get("set-cookie", "")


async def test_a_form_posted_without_its_csrf_token_is_refused(world: ConsoleWorld) -> None:
    browser = world.browser()
    await browser.sign_in("alice")
    answer = await browser.client.post("/console/signout", data={"csrf": ""})
    assert answer.status_code == 403
    still = await browser.get("/console")
    assert still.status_code == 200  # the session was not ended


async def test_a_form_from_another_origin_is_refused_even_with_its_token(
    world: ConsoleWorld,
) -> None:
    browser = world.browser()
    await browser.sign_in("alice")
    page = await browser.get("/console")
    answer = await browser.client.post(
        "/console/signout",
        data={"csrf": csrf(page)},
        headers={"origin": "https://evil.example"},
    )
    assert answer.status_code == 403


async def test_signing_out_ends_the_session_on_the_server(world: ConsoleWorld) -> None:
    browser = world.browser()
    await browser.sign_in("alice")
    cookie = browser.client.cookies.get("appdeck_console")
    answer = await browser.post_form("/console", "/console/signout")
    assert answer.status_code == 303
    other = world.browser()
    other.client.cookies.set("appdeck_console", cookie or "", path="/console")
    again = await other.get("/console")
    assert again.status_code == 303  # the stolen cookie opens nothing any more


async def test_a_disabled_user_loses_the_console_at_the_next_page(world: ConsoleWorld) -> None:
    browser = world.browser()
    await browser.sign_in("bob")
    assert (await browser.get("/console")).status_code == 200
    user = await world.services.identities.find_user("acme", "bob")
    assert user is not None
    await world.services.identities.set_user_disabled(user.id, True)
    assert (await browser.get("/console")).status_code == 303


async def test_after_sign_in_the_browser_goes_back_to_the_page_it_asked_for_but_never_off_site(
    world: ConsoleWorld,
) -> None:
    browser = world.browser()
    for asked, expected in [
        ("/console/apps/7", "/console/apps/7"),
        ("https://evil.example/", "/console"),
        ("//evil.example/console", "/console"),
        ("/console//evil.example", "/console"),
    ]:
        form = await browser.get("/console/signin")
        answer = await browser.client.post(
            "/console/signin",
            data={
                "tenant": "acme",
                "username": "alice",
                "password": PASSWORD,
                "csrf": csrf(form),
                "next": asked,
            },
        )
        assert answer.headers["location"] == expected
        browser.client.cookies.clear()


async def test_a_disabled_tenant_loses_the_console_and_cannot_sign_in(world: ConsoleWorld) -> None:
    browser = world.browser()
    await browser.sign_in("alice")
    await world.services.identities.set_tenant_disabled("acme", True)
    assert (await browser.get("/console")).status_code == 303
    form = await browser.get("/console/signin")
    answer = await browser.client.post(
        "/console/signin",
        data={"tenant": "acme", "username": "alice", "password": PASSWORD, "csrf": csrf(form)},
    )
    assert answer.status_code == 401


async def test_absurd_sign_in_fields_are_refused_cleanly(world: ConsoleWorld) -> None:
    browser = world.browser()
    for fields in [
        {"tenant": "acme\x00", "username": "alice", "password": PASSWORD},
        {"tenant": "a" * 10_000, "username": "alice", "password": PASSWORD},
        {"tenant": "acme", "username": "alice", "password": "p" * 5000},
        {"tenant": "ácmé", "username": "🦊", "password": PASSWORD},
    ]:
        form = await browser.get("/console/signin")
        answer = await browser.client.post("/console/signin", data={**fields, "csrf": csrf(form)})
        assert answer.status_code in (400, 401), answer.status_code
        assert "appdeck_console=" not in answer.headers.get("set-cookie", "")
    huge = await browser.client.post(
        "/console/signin",
        content=b"x=" + b"y" * 100_000,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert huge.status_code == 413


async def test_a_new_password_signs_the_users_browsers_out(world: ConsoleWorld) -> None:
    browser = world.browser()
    await browser.sign_in("bob")
    other = world.browser()
    await other.sign_in("alice")
    await world.admin.set_password("acme", "bob", "a brand new passphrase")
    assert (await browser.get("/console")).status_code == 303  # signed out
    assert (await other.get("/console")).status_code == 200  # another user's: untouched
    await browser.sign_in("bob", password="a brand new passphrase")
    assert (await browser.get("/console")).status_code == 200
