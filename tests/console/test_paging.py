"""Numbers in console URLs: ASCII digits only, offsets clamped; never a 500, on the new tabs
and on the skeleton's pages alike."""

from __future__ import annotations

from appdeck.console.paging import MAX_OFFSET, number
from tests.console.conftest import ConsoleWorld


def test_only_ascii_digits_are_numbers() -> None:
    assert number("42") == 42
    for raw in ["", "-1", "①", "²", "٣", "1e3", " 1", "1" * 19]:
        assert number(raw) is None, raw
    assert MAX_OFFSET == 1_000_000


async def test_unicode_digits_in_the_skeletons_urls_are_a_404_or_a_clamp(
    world: ConsoleWorld,
) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    browser = world.browser()
    await browser.sign_in("bob")
    assert (await browser.get("/console/apps/%E2%91%A0")).status_code == 404
    for path in [
        "/console?offset=%E2%91%A0",
        "/console/fragments/apps?offset=%C2%B2",
        f"/console/apps/{app_id}?offset=%E2%91%A0",
        f"/console/apps/{app_id}/actions/rollback?number=%E2%91%A0",
        "/console/tenant?offset=%E2%91%A0",
    ]:
        assert (await browser.get(path)).status_code == 200, path
