"""The overview and an app's page as each role sees them; another tenant's app is a 404."""

from __future__ import annotations

from tests.console.conftest import ConsoleWorld


async def test_the_overview_lists_the_app_an_agent_registered_through_mcp(
    world: ConsoleWorld,
) -> None:
    bob = await world.agent("bob")
    made = await bob.ok("register_app", name="shop", description="a shop")
    browser = world.browser()
    await browser.sign_in("bob")
    overview = await browser.get("/console")
    assert overview.status_code == 200
    assert f'href="/console/apps/{made["app_id"]}"' in overview.text
    assert "shop--acme.localhost" in overview.text
    assert "never" in overview.text  # no deploy yet


async def test_another_tenants_app_answers_404_everywhere(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    for path in [
        f"/console/apps/{app_id}",
        f"/console/apps/{app_id}/fragments/timeline",
        f"/console/apps/{app_id}/fragments/health",
        f"/console/apps/{app_id}/events",
        f"/console/apps/{app_id}/actions/rollback",
        "/console/apps/999999",
        "/console/apps/not-a-number",
    ]:
        page = await eve.get(path)
        assert page.status_code == 404, path
        assert "shop" not in page.text
    overview = await eve.get("/console")
    assert "shop" not in overview.text


async def test_a_viewer_sees_the_timeline_but_no_action(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    carol = world.browser()
    await carol.sign_in("carol")
    page = await carol.get(f"/console/apps/{app_id}")
    assert page.status_code == 200
    assert "Deployments" in page.text
    assert "/actions/" not in page.text
    confirm = await carol.get(f"/console/apps/{app_id}/actions/rollback")
    assert confirm.status_code == 403
    owner = world.browser()
    await owner.sign_in("bob")
    assert (
        f"/console/apps/{app_id}/actions/rollback"
        in (await owner.get(f"/console/apps/{app_id}")).text
    )


async def test_a_viewer_posting_an_action_anyway_is_refused_by_the_platform(
    world: ConsoleWorld,
) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    carol = world.browser()
    await carol.sign_in("carol")
    answer = await carol.post_form(
        f"/console/apps/{app_id}", f"/console/apps/{app_id}/actions/stop", confirm="yes"
    )
    assert answer.status_code == 403
    assert not (await bob.ok("manage_app", app_id=app_id, action="get"))["stopped"]


async def test_an_unknown_console_path_is_a_404_page(world: ConsoleWorld) -> None:
    browser = world.browser()
    await browser.sign_in("alice")
    page = await browser.get("/console/nothing/here")
    assert page.status_code == 404
    assert "There is no such page." in page.text
