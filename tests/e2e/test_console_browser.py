"""The console (issue 24) in a real browser against a real server process.

An agent (the official MCP client, as the dev user) registers and deploys the fixture app; a
person signs in to ``/console`` in Debian's headless Chromium (driven by Playwright, as in
``test_oauth_browser.py``) and sees it on the overview. The agent then starts a canary as a
task, and the app's page, never reloaded, shows each step of it as it happens (a
``MutationObserver`` installed in the page records when each step's text first appears: it
survives only if the page is not reloaded). The person rolls back through the confirmation
page and the timeline shows the rollback. A viewer of the app sees no action and its action
URL answers 403; a user of another tenant gets 404 for the app; a form posted without its CSRF
token is refused.

Then every page of :data:`PAGES` is audited with axe-core (pinned in ``tools/axe``, injected
by the test) at desktop width and at 390 px: no ``serious`` or ``critical`` violation. With
``APPDECK_SCREENSHOTS=1`` (or a directory; ``scripts/screenshots``) each page's desktop
screenshot is written as ``docs/images/console-<page>.png``.

Every wait is bounded (:data:`STEP_MS` for each browser step, an overall timeout per phase).
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import pytest
from mcp import Client
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import call_tool_as_task, hello_source, official_client, task_result
from tests.e2e.test_oauth_browser import CHROMIUM, CHROMIUM_ARGS, DEV_PASSWORD
from tests.support.appdeck_process import AppDeckProcess, run_appdeck

ROOT: Final = Path(__file__).resolve().parents[2]
AXE_DIR: Final = ROOT / "tools" / "axe"
AXE: Final = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
IMAGES: Final = ROOT / "docs" / "images"
STEP_MS: Final = 15_000
"""Every browser action and wait is bounded by this."""
DESKTOP: Final = {"width": 1280, "height": 900}
PHONE: Final = {"width": 390, "height": 844}
PASSWORD: Final = "a console password long enough"
SECRET: Final = "s3cr3t-value-nobody-sees"
BLOCKING: Final = frozenset({"serious", "critical"})


@dataclass(frozen=True)
class ConsolePage:
    """A page every audit visits: ``path`` may name ``{app}`` (the deployed app's id)."""

    name: str
    path: str
    signed_in: bool = True
    status: int = 200


PAGES: Final[list[ConsolePage]] = [
    ConsolePage("overview", "/console"),
    ConsolePage("app", "/console/apps/{app}"),
    ConsolePage("confirm", "/console/apps/{app}/actions/rollback"),
    ConsolePage("logs", "/console/apps/{app}/logs"),
    ConsolePage("env", "/console/apps/{app}/env"),
    ConsolePage("env-reveal", "/console/apps/{app}/env/reveal"),
    ConsolePage("domains", "/console/apps/{app}/domains"),
    ConsolePage("repo", "/console/apps/{app}/repo"),
    ConsolePage("tables", "/console/apps/{app}/tables"),
    ConsolePage("apis", "/console/apps/{app}/apis"),
    ConsolePage("ci", "/console/apps/{app}/ci"),
    ConsolePage("account", "/console/account"),
    ConsolePage("tenant", "/console/tenant"),
    ConsolePage("audit", "/console/audit"),
    ConsolePage("signin", "/console/signin", signed_in=False),
    ConsolePage("error", "/console/apps/999999999", status=404),
]
"""Every console page, audited with axe-core at both widths and screenshotted: add new ones."""

CANARY_STEPS: Final = [
    "Building",
    "Starting the new release",
    "Canary at 20%",
    "Canary at 50%",
    "Live: hello serves release 2",
]
"""The canary's steps, in order, as the timeline shows them."""

_WATCH_STEPS: Final = """(markers) => {
  window.__seen = {};
  const look = () => {
    const el = document.getElementById("deployment-2");
    const text = el ? el.textContent : "";
    for (const m of markers) {
      if (!(m in window.__seen) && text.includes(m)) window.__seen[m] = performance.now();
    }
  };
  new MutationObserver(look).observe(document.getElementById("timeline"),
    {childList: true, subtree: true, characterData: true});
  look();
}"""


def _axe_ready() -> Path:
    """axe-core as pinned in tools/axe (installed on first use: CI has npm and its registry)."""
    if not AXE.exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=AXE_DIR,
            check=True,
            timeout=300,
        )
    return AXE


def _shots_dir() -> Path | None:
    """Where screenshots go: ``APPDECK_SCREENSHOTS=1`` means docs/images; another non-empty
    value is a directory (``scripts/screenshots`` passes docs/images)."""
    value = os.environ.get("APPDECK_SCREENSHOTS", "")
    if not value:
        return None
    return IMAGES if value == "1" else Path(value)


def _cli(server: AppDeckProcess, *args: str, stdin: str | None = None) -> None:
    """``appdeck ARGS --data-dir DATA``: what an operator types next to the running server."""
    done = run_appdeck(*args, "--data-dir", str(server.data_dir), env={}, input=stdin)
    assert done.returncode == 0, done.stderr


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, timeout=STEP_MS * 2
        )
        try:
            yield browser
        finally:
            await browser.close()


async def _context(browser: Browser, **options: Any) -> BrowserContext:
    context = await browser.new_context(viewport=DESKTOP, **options)  # type: ignore[arg-type]
    context.set_default_timeout(STEP_MS)
    context.set_default_navigation_timeout(STEP_MS)
    return context


async def _sign_in(context: BrowserContext, origin: str, tenant: str, user: str, pw: str) -> Page:
    page = await context.new_page()
    await page.goto(f"{origin}/console/signin")
    await page.locator("#tenant").fill(tenant)
    await page.locator("#username").fill(user)
    await page.locator("#password").fill(pw)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{origin}/console")
    return page


def _spec(source: Path) -> dict[str, Any]:
    return {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "instances": 2,
        "canary": {"percent": 20, "steps": [20, 50, 100], "analysis_window_s": 4},
    }


async def _call(client: Client, name: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, (name, result.content)
    return result.structured_content


@pytest.mark.e2e
async def test_a_person_watches_a_canary_live_rolls_back_and_every_page_passes_axe(
    launch_appdeck: Launcher, chromium: Browser, tmp_path: Path
) -> None:
    axe = _axe_ready()
    source, env = hello_source(tmp_path)
    server = await launch_appdeck(env=env)
    found = DEV_PASSWORD.search(server.stdout_path.read_text(errors="replace"))
    assert found, "appdeck serve --dev printed no dev password"
    dev_password = found.group(1)
    origin = server.origin
    _cli(server, "user", "create", "--tenant", "dev", "--name", "vera", "--password-stdin",
         stdin=PASSWORD + "\n")  # fmt: skip
    _cli(server, "tenant", "create", "other")
    _cli(server, "user", "create", "--tenant", "other", "--name", "olga", "--password-stdin",
         stdin=PASSWORD + "\n")  # fmt: skip

    async with official_client(server) as agent:
        async with asyncio.timeout(90):
            made = await _call(agent, "register_app", {"name": "hello", "spec": _spec(source)})
            app_id = made["app_id"]
            await _call(
                agent,
                "env_vars",
                {"app_id": app_id, "action": "set", "name": "API_KEY", "value": SECRET},
            )
            first = await _call(agent, "deploy_app", {"app_id": app_id, "wait_seconds": 60})
            assert first["state"] == "live", first
            await _call(
                agent,
                "manage_app",
                {"app_id": app_id, "action": "grant", "user": "vera", "role": "viewer"},
            )

        person = await _context(chromium)
        page = await _sign_in(person, origin, "dev", "dev", dev_password)
        overview = page.locator("table.apps")
        await overview.get_by_role("link", name="hello", exact=True).wait_for()
        assert SECRET not in await page.content()

        await page.get_by_role("link", name="hello", exact=True).click()
        await page.wait_for_url(f"{origin}/console/apps/{app_id}")
        await page.locator("body[data-live-connected]").wait_for(state="attached")
        await page.evaluate(_WATCH_STEPS, CANARY_STEPS)

        async with asyncio.timeout(120):
            created = await call_tool_as_task(
                agent, "deploy_app", {"app_id": app_id, "strategy": "canary"}
            )
            for marker in CANARY_STEPS:  # each in turn, as the deploy reaches it
                await page.wait_for_function(
                    "(m) => window.__seen && m in window.__seen", arg=marker, timeout=60_000
                )
            result = await task_result(agent, created.task.task_id, read_timeout=60)
            assert result.structured_content is not None
            assert result.structured_content["state"] == "live", result
        seen: dict[str, float] = await page.evaluate("window.__seen")  # still there: no reload
        times = [seen[m] for m in CANARY_STEPS]
        assert times == sorted(times), seen
        # the canary holds each share for 4 s: the page showed them apart, while it ran
        assert seen["Canary at 20%"] < seen["Canary at 50%"] < seen[CANARY_STEPS[-1]], seen
        await page.locator("#deployment-2 .state-live").first.wait_for()

        await page.locator(".actions").get_by_role("link", name="Roll back").click()
        await page.wait_for_url(re.compile(r".*/actions/rollback$"))
        assert "Put the release before the live one of hello back live" in (
            await page.locator("main").inner_text()
        )
        await page.get_by_role("button", name="Roll back").click()
        await page.wait_for_url(re.compile(rf".*/console/apps/{app_id}\?done=rollback$"))
        # the rollback puts #1 back live; the page (reloaded by the redirect, then live) shows it
        await page.locator("#deployment-1 summary .state-live").wait_for(timeout=60_000)
        await page.locator("#deployment-2 summary .state-live").wait_for(state="detached")
        assert SECRET not in await page.content()

        # the app's log, followed live: a request to the app writes a line the page shows
        await page.goto(f"{origin}/console/apps/{app_id}/logs")
        await page.locator("pre.log[data-follow]").wait_for()
        ingress = urlsplit(made["url"])
        marker = f"/items/{secrets.randbelow(10**9)}"
        async with httpx.AsyncClient(timeout=10) as http:
            fetched = await http.get(
                f"http://127.0.0.1:{ingress.port}{marker}", headers={"host": ingress.netloc}
            )
        assert fetched.status_code == 200, fetched.text
        await page.wait_for_function(
            "(m) => document.querySelector('pre.log').textContent.includes(m)",
            arg=marker,
            timeout=30_000,
        )
        assert SECRET not in await page.content()
        await page.goto(f"{origin}/console/apps/{app_id}/env")
        assert "API_KEY" in await page.locator("main").inner_text()
        assert SECRET not in await page.content()  # values only on a confirmed reveal

        # a form posted without its CSRF token (the page's cookies, through Playwright)
        refused = await person.request.post(
            f"{origin}/console/apps/{app_id}/actions/restart", form={"confirm": "yes"}
        )
        assert refused.status == 403, await refused.text()
        assert "could not be verified" in await refused.text()

        viewer = await _context(chromium)
        as_viewer = await _sign_in(viewer, origin, "dev", "vera", PASSWORD)
        await as_viewer.goto(f"{origin}/console/apps/{app_id}")
        await as_viewer.locator("#deployment-2").wait_for()
        assert await as_viewer.locator(".actions").count() == 0
        assert await as_viewer.locator('a[href*="/actions/"]').count() == 0
        assert SECRET not in await as_viewer.content()
        await as_viewer.goto(f"{origin}/console/apps/{app_id}/env")
        assert "API_KEY" in await as_viewer.locator("main").inner_text()
        assert SECRET not in await as_viewer.content()
        assert await as_viewer.locator('a[href$="/env/reveal"]').count() == 0
        answer = await as_viewer.goto(f"{origin}/console/apps/{app_id}/actions/rollback")
        assert answer is not None
        assert answer.status == 403

        stranger = await _context(chromium)
        as_stranger = await _sign_in(stranger, origin, "other", "olga", PASSWORD)
        for path in (f"/console/apps/{app_id}", f"/console/apps/{app_id}/actions/rollback"):
            answer = await as_stranger.goto(f"{origin}{path}")
            assert answer is not None
            assert answer.status == 404, path

        # axe-core is injected as a script tag, which the console's CSP forbids: auditing
        # tools bypass the page's CSP (Playwright's bypass_csp), the pages are unchanged
        audited = await _context(chromium, bypass_csp=True)
        await _sign_in(audited, origin, "dev", "dev", dev_password)
        anonymous = await _context(chromium, bypass_csp=True)
        shots = _shots_dir()
        if shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
        problems = []
        for entry in PAGES:
            context = audited if entry.signed_in else anonymous
            problems += await _audit(context, origin, entry, app_id, axe, shots)
        assert not problems, "axe-core found serious or critical violations:\n" + "\n".join(
            problems
        )
        await _call(agent, "manage_app", {"app_id": app_id, "action": "delete", "confirm": True})


async def _audit(
    context: BrowserContext,
    origin: str,
    entry: ConsolePage,
    app_id: int,
    axe: Path,
    shots: Path | None,
) -> list[str]:
    """axe-core's serious and critical violations of one page at both widths, readable."""
    problems: list[str] = []
    page = await context.new_page()
    try:
        for width, viewport in (("desktop", DESKTOP), ("390px", PHONE)):
            await page.set_viewport_size(viewport)  # type: ignore[arg-type]
            answer = await page.goto(origin + entry.path.format(app=app_id))
            assert answer is not None
            assert answer.status == entry.status, entry
            await page.add_script_tag(path=axe)
            report = await page.evaluate(
                "async () => await axe.run(document, {resultTypes: ['violations']})"
            )
            assert report["passes"], f"axe-core checked nothing on {entry.name}"
            for violation in report["violations"]:
                if violation["impact"] in BLOCKING:
                    where = "; ".join(", ".join(n["target"]) for n in violation["nodes"][:5])
                    problems.append(
                        f"{entry.name} ({width}): {violation['impact']} {violation['id']}: "
                        f"{violation['help']} at {where}"
                    )
            if shots is not None and width == "desktop":
                await page.screenshot(path=shots / f"console-{entry.name}.png", full_page=True)
    finally:
        await page.close()
    return problems
