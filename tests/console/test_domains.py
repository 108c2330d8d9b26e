"""The domains section: the app's URLs, each custom domain's state (the TXT record of a pending
one, the URL of a verified one) for every member; another tenant's app is a 404."""

from __future__ import annotations

from appdeck.console.render import html
from tests.console.conftest import ConsoleWorld

SHOP = "shop.example.test"
BLOG = "blog.example.test"


async def _app(world: ConsoleWorld) -> int:
    alice = await world.agent("alice")
    spec = {"domains": [SHOP, BLOG]}
    app_id = int((await alice.ok("register_app", name="shop", spec=spec))["app_id"])
    await alice.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    return app_id


async def test_a_pending_domain_shows_its_txt_record_and_a_verified_one_its_url(
    world: ConsoleWorld,
) -> None:
    app_id = await _app(world)
    platform = world.services.platform
    assert platform is not None
    app = await platform.apps.store.get(app_id)
    assert app is not None
    await platform.domains.claim(app)
    assert await platform.domains.mark_verified(BLOG)
    token = platform.domains.token(SHOP, app_id)
    for user in ("alice", "carol"):
        browser = world.browser()
        await browser.sign_in(user)
        page = await browser.get(f"/console/apps/{app_id}/domains")
        assert page.status_code == 200, user
        assert "http://shop--acme.localhost:" in page.text  # the app's own URL
        assert f"_appdeck-challenge.{SHOP}" in page.text
        assert token in page.text
        assert f'href="http://{BLOG}' in page.text
        assert "verified" in page.text
        assert "pending" in page.text


async def test_an_app_without_domains_says_how_to_add_one(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="plain"))["app_id"]
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/domains")
    assert page.status_code == 200
    assert "No custom domain" in page.text


async def test_another_tenant_gets_404_on_the_domains_page(world: ConsoleWorld) -> None:
    app_id = await _app(world)
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    page = await eve.get(f"/console/apps/{app_id}/domains")
    assert page.status_code == 404
    assert SHOP not in page.text


def test_a_certificate_shows_its_state_and_an_escaped_error() -> None:
    failed = {
        "state": "failed",
        "error": "<img src=x onerror=alert(1)> refused",
        "next_try": "2026-11-28T00:00:00+00:00",
    }
    shown = html("app/_tls.html", cert=failed)
    assert "state-tls-failed" in shown
    assert "&lt;img src=x onerror=alert(1)&gt; refused" in shown
    assert "<img" not in shown
    assert "next try 2026-11-28" in shown
    issued = html("app/_tls.html", cert={"state": "issued", "live": True, "not_after": "2027"})
    assert "served, valid until 2027" in issued
    assert "none" in html("app/_tls.html", cert=None)
