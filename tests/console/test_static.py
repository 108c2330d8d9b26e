"""``static/console.js`` in Debian's Chromium (Playwright), against a routed fake console: the
page, its event stream and its fragments are answered by the test, so what the script does
with each change is observed exactly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import orjson
import pytest
from playwright.async_api import BrowserContext, Route, async_playwright

from appdeck.console.routes import STATIC
from tests.e2e.test_oauth_browser import CHROMIUM, CHROMIUM_ARGS

ORIGIN: Final = "http://console.test"
PAGE: Final = """<!doctype html><html lang="en"><head><title>t</title>
<script src="/console/static/console.js" defer></script></head>
<body data-live="/console/apps/1/events"><div id="part" data-refresh="/frag" data-on="*">v0</div>
</body></html>"""


def _events(*kinds: str) -> bytes:
    """An SSE body of ``kinds`` changes, all in one chunk; no reconnect for ten minutes."""
    out = b"retry: 600000\n\n"
    for kind in kinds:
        out += b"event: change\ndata: " + orjson.dumps({"kind": kind, "app": 1}) + b"\n\n"
    return out


@pytest.fixture
async def context(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, timeout=30_000
        )
        made = await browser.new_context()
        made.set_default_timeout(10_000)
        try:
            yield made
        finally:
            await browser.close()


async def test_a_change_arriving_while_a_part_is_being_fetched_is_fetched_again(
    context: BrowserContext,
) -> None:
    fetched: list[int] = []
    script = (STATIC / "console.js").read_bytes()

    async def answer(route: Route) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        if path == "/console/apps/1":
            await route.fulfill(content_type="text/html", body=PAGE)
        elif path == "/console/static/console.js":
            await route.fulfill(content_type="text/javascript", body=script)
        elif path == "/console/apps/1/events":
            # two changes at once: the second arrives while the first one's fetch is out
            await route.fulfill(content_type="text/event-stream", body=_events("a", "b"))
        elif path == "/frag":
            fetched.append(len(fetched) + 1)
            version = len(fetched)
            if version == 1:
                await asyncio.sleep(0.3)  # a slow server: the second change comes meanwhile
            await route.fulfill(content_type="text/html", body=f"v{version}")
        else:
            await route.fulfill(status=404, body="")

    await context.route(f"{ORIGIN}/**", answer)
    page = await context.new_page()
    await page.goto(f"{ORIGIN}/console/apps/1")
    # the part ends as the server had it after the last change, not one change behind
    await page.wait_for_function("document.getElementById('part').textContent === 'v2'")
    assert fetched == [1, 2]  # once more, not once per change waiting


async def test_a_change_refreshes_only_the_parts_that_follow_its_kind(
    context: BrowserContext,
) -> None:
    fetched: list[str] = []
    script = (STATIC / "console.js").read_bytes()
    page_html = PAGE.replace(
        'data-on="*">v0</div>',
        'data-on="deployment.updated">v0</div>'
        '<div id="other" data-refresh="/other" data-on="app.updated">o0</div>',
    )

    async def answer(route: Route) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        if path == "/console/apps/1":
            await route.fulfill(content_type="text/html", body=page_html)
        elif path == "/console/static/console.js":
            await route.fulfill(content_type="text/javascript", body=script)
        elif path == "/console/apps/1/events":
            await route.fulfill(
                content_type="text/event-stream", body=_events("deployment.updated")
            )
        elif path in ("/frag", "/other"):
            fetched.append(path)
            await route.fulfill(content_type="text/html", body="v1")
        else:
            await route.fulfill(status=404, body="")

    await context.route(f"{ORIGIN}/**", answer)
    page = await context.new_page()
    await page.goto(f"{ORIGIN}/console/apps/1")
    await page.wait_for_function("document.getElementById('part').textContent === 'v1'")
    assert await page.locator("#other").inner_text() == "o0"
    assert fetched == ["/frag"]
