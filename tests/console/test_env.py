"""The env section: names for viewers and up, values only for admins on a confirmed, audited,
uncached POST; a viewer or developer sees no value and no reveal button, and is refused."""

from __future__ import annotations

import json
from typing import Any

from tests.console.conftest import ConsoleWorld

SECRET = "s3cr3t-<b>value</b>"


async def _app(world: ConsoleWorld) -> int:
    alice = await world.agent("alice")
    app_id = int((await alice.ok("register_app", name="shop"))["app_id"])
    await alice.ok("env_vars", app_id=app_id, action="set", name="API_KEY", value=SECRET)
    await alice.ok("env_vars", app_id=app_id, action="set", name="MODE", value="production")
    await alice.ok("manage_app", app_id=app_id, action="grant", user="bob", role="developer")
    await alice.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    return app_id


async def _reveals(world: ConsoleWorld) -> list[dict[str, Any]]:
    await world.services.audit.flush()
    rows = await world.services.audit_store.tail(1000, tenant_id="acme")
    return [r for r in rows if r["event"] == "console_action" and r["action"] == "env.reveal"]


async def test_every_member_sees_the_names_and_only_an_admin_gets_a_reveal_button(
    world: ConsoleWorld,
) -> None:
    app_id = await _app(world)
    for user, button in (("alice", True), ("bob", False), ("carol", False)):
        browser = world.browser()
        await browser.sign_in(user)
        page = await browser.get(f"/console/apps/{app_id}/env")
        assert page.status_code == 200, user
        assert "API_KEY" in page.text
        assert "MODE" in page.text
        assert "s3cr3t" not in page.text
        assert "production" not in page.text
        assert (f"/console/apps/{app_id}/env/reveal" in page.text) is button, user


async def test_the_names_fragment_follows_a_change_and_holds_no_value(
    world: ConsoleWorld,
) -> None:
    app_id = await _app(world)
    carol = world.browser()
    await carol.sign_in("carol")
    page = await carol.get(f"/console/apps/{app_id}/env")
    assert f'data-refresh="/console/apps/{app_id}/fragments/env"' in page.text
    alice = await world.agent("alice")
    await alice.ok("env_vars", app_id=app_id, action="set", name="LATER", value="later-value")
    fragment = await carol.get(f"/console/apps/{app_id}/fragments/env")
    assert fragment.status_code == 200
    assert "LATER" in fragment.text
    assert "later-value" not in fragment.text
    assert "<html" not in fragment.text


async def test_an_admin_reveals_the_values_once_uncached_and_audited(world: ConsoleWorld) -> None:
    app_id = await _app(world)
    alice = world.browser()
    await alice.sign_in("alice")
    confirm = await alice.get(f"/console/apps/{app_id}/env/reveal")
    assert confirm.status_code == 200
    assert "s3cr3t" not in confirm.text  # asking shows nothing yet
    shown = await alice.post_form(
        f"/console/apps/{app_id}/env/reveal", f"/console/apps/{app_id}/env/reveal", confirm="yes"
    )
    assert shown.status_code == 200
    assert shown.headers["cache-control"] == "no-store"
    assert "s3cr3t-&lt;b&gt;value&lt;/b&gt;" in shown.text  # escaped, whole
    assert "<b>value</b>" not in shown.text
    assert "production" in shown.text
    audited = await _reveals(world)
    assert [(r["outcome"], r["app_id"]) for r in audited] == [("ok", app_id)]
    detail = audited[0]["detail"]
    assert (json.loads(detail) if isinstance(detail, str) else detail) == {"names": 2}
    assert "s3cr3t" not in repr(audited)


async def test_a_developer_or_viewer_posting_a_reveal_anyway_is_refused_by_the_platform(
    world: ConsoleWorld,
) -> None:
    app_id = await _app(world)
    for user in ("bob", "carol"):
        browser = world.browser()
        await browser.sign_in(user)
        assert (await browser.get(f"/console/apps/{app_id}/env/reveal")).status_code == 403
        answer = await browser.post_form(
            f"/console/apps/{app_id}/env", f"/console/apps/{app_id}/env/reveal", confirm="yes"
        )
        assert answer.status_code == 403, user
        assert "s3cr3t" not in answer.text
        assert "production" not in answer.text
    assert [r["outcome"] for r in await _reveals(world)] == ["denied", "denied"]


async def test_a_reveal_without_confirmation_or_csrf_shows_nothing(world: ConsoleWorld) -> None:
    app_id = await _app(world)
    alice = world.browser()
    await alice.sign_in("alice")
    unconfirmed = await alice.post_form(
        f"/console/apps/{app_id}/env", f"/console/apps/{app_id}/env/reveal"
    )
    assert unconfirmed.status_code == 400
    forged = await alice.client.post(
        f"/console/apps/{app_id}/env/reveal", data={"csrf": "forged", "confirm": "yes"}
    )
    assert forged.status_code == 403
    for answer in (unconfirmed, forged):
        assert "s3cr3t" not in answer.text
    assert await _reveals(world) == []


async def test_another_tenant_gets_404_on_every_env_page(world: ConsoleWorld) -> None:
    app_id = await _app(world)
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    for path in (
        f"/console/apps/{app_id}/env",
        f"/console/apps/{app_id}/fragments/env",
        f"/console/apps/{app_id}/env/reveal",
    ):
        page = await eve.get(path)
        assert page.status_code == 404, path
        assert "API_KEY" not in page.text
    answer = await eve.post_form("/console", f"/console/apps/{app_id}/env/reveal", confirm="yes")
    assert answer.status_code == 404
    assert "s3cr3t" not in answer.text
