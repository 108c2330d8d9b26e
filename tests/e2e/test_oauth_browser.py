"""The OAuth journey a newcomer takes, in a real browser against a real server process.

The official Python SDK's OAuth client (``mcp.client.auth.OAuthClientProvider``) is given
``http://localhost:PORT/mcp`` (the server prints ``127.0.0.1``: the other spelling must work).
Its redirect handler hands the authorization URL to a headless Chromium (Debian's ``chromium``
driven by Playwright; no browser is downloaded), which types the tenant, username and password
and presses Enter (which must mean Allow). The browser is then sent to the client's redirect
URI, caught by the test (Playwright's request routing, as a loopback listener would), and the
SDK redeems the code and lists the tools. The first sign-in leaves ``apps:write`` unticked, so
``register_app`` is refused for its scope: the SDK steps up, and the browser, already known to
the server, is shown the step-up page (what was granted, what is new), where Enter again allows.

Screenshots of both pages go to the test's temporary directory; with
``APPDECK_SCREENSHOTS=DIR`` (``scripts/screenshots`` sets ``docs/images``) they are written
there as ``sign-in.png`` and ``step-up.png``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from playwright.async_api import BrowserContext, Page, Route, async_playwright

from tests.support.appdeck_process import AppDeckProcess
from tests.support.laptop_agent import MemoryStorage

from .conftest import Launcher

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
CALLBACK = "http://127.0.0.1:45999/callback"
DEV_PASSWORD = re.compile(r"admin user 'dev', password: (\S+)")
STEP_MS = 15_000
"""Every browser action and wait (navigation, typing, the redirect) is bounded by this."""


class Browser:
    """One browser profile that answers the sign-in pages it is sent to, like a person would,
    and catches the redirect back to the client."""

    def __init__(self, context: BrowserContext, shots: Path, password: str) -> None:
        self.context = context
        self.shots = shots
        self.password = password
        self.pages: list[str] = []  # "sign-in" / "step-up", in the order they were shown
        self._code: asyncio.Future[str] | None = None

    async def _catch(self, route: Route) -> None:
        if self._code is not None and not self._code.done():
            self._code.set_result(route.request.url)
        await route.fulfill(status=200, content_type="text/plain", body="You may close this tab.")

    async def authorize(self, url: str) -> None:
        """The SDK's redirect handler: sign in on the page and press Enter."""
        assert url.startswith("http://localhost:"), url
        self._code = asyncio.get_running_loop().create_future()
        page = await self.context.new_page()
        await page.route(f"{CALLBACK}*", self._catch)
        await page.goto(url)
        heading = await page.locator("h1").inner_text()
        if "asks for more access" in heading:
            await self._step_up(page)
        else:
            await self._sign_in(page)
        await page.locator("#password").press("Enter")

    async def _sign_in(self, page: Page) -> None:
        self.pages.append("sign-in")
        assert await page.locator("select").count() == 0  # no list of tenants
        await page.locator("#tenant").fill("dev")
        await page.locator("#username").fill("dev")
        await page.locator("#password").fill(self.password)
        await page.locator('input[name=scope][value="apps:write"]').uncheck()
        await page.screenshot(path=self.shots / "sign-in.png", full_page=True)

    async def _step_up(self, page: Page) -> None:
        self.pages.append("step-up")
        granted = await page.locator(".granted").inner_text()
        assert "apps:read" in granted
        assert "apps:write" not in granted
        new = page.locator("label.new")
        assert await new.count() == 1
        assert "apps:write" in await new.inner_text()
        # the browser signed in before: tenant and user are filled in, the password is not
        assert await page.locator("#tenant").input_value() == "dev"
        assert await page.locator("#username").input_value() == "dev"
        await page.locator("#password").fill(self.password)
        await page.screenshot(path=self.shots / "step-up.png", full_page=True)

    async def callback(self) -> AuthorizationCodeResult:
        """The SDK's callback handler: the code (and state, iss) the browser was sent back with."""
        assert self._code is not None
        async with asyncio.timeout(STEP_MS / 1000):
            url = await self._code
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        assert "error" not in query, query  # Enter must not have meant Deny
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),  # a fresh profile
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 720, "height": 900},
            timeout=STEP_MS * 2,
        )
        context.set_default_timeout(STEP_MS)
        context.set_default_navigation_timeout(STEP_MS)
        try:
            yield context
        finally:
            await context.close()


def _dev_password(server: AppDeckProcess) -> str:
    found = DEV_PASSWORD.search(server.stdout_path.read_text(errors="replace"))
    assert found, "appdeck serve --dev printed no dev password"
    return found.group(1)


async def test_a_person_signs_in_with_enter_in_a_real_browser_and_steps_up(
    launch_appdeck: Launcher, browser: BrowserContext, tmp_path: Path
) -> None:
    server = await launch_appdeck()
    port = urlsplit(server.url).port
    url = f"http://localhost:{port}/mcp"  # the server itself prints 127.0.0.1
    shots = tmp_path / "shots"
    shots.mkdir()
    person = Browser(browser, shots, _dev_password(server))
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="Browser journey",
            redirect_uris=[CALLBACK],  # type: ignore[list-item]  # pydantic converts it
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="none",
        ),
        storage=MemoryStorage(),
        redirect_handler=person.authorize,
        callback_handler=person.callback,
    )
    async with asyncio.timeout(120):
        async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(15, read=60)) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode="legacy") as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                assert "list_my_apps" in tools
                assert "register_app" not in tools  # apps:write was left unticked
                assert person.pages == ["sign-in"]
                listed = await client.call_tool("list_my_apps", {})
                assert not listed.is_error
                made = await client.call_tool("register_app", {"name": "from-browser"})
                assert not made.is_error, made.content
                assert person.pages == ["sign-in", "step-up"]
                tools = {t.name for t in (await client.list_tools()).tools}
                assert "register_app" in tools
    for name in ("sign-in.png", "step-up.png"):
        assert (shots / name).stat().st_size > 10_000
    target = os.environ.get("APPDECK_SCREENSHOTS")
    if target:
        _keep(shots, Path(target))


def _keep(shots: Path, target: Path) -> None:
    """Copy the screenshots where ``APPDECK_SCREENSHOTS`` asks (``docs/images``)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("sign-in.png", "step-up.png"):
        shutil.copyfile(shots / name, target / name)
