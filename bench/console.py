"""The console's figures (issue 24): render time, bytes per page, live update delay.

    .venv/bin/python bench/console.py [--requests 300] [--changes 60] [--port 8944] [--no-append]

One in-process server (``Services.start`` on a fresh SQLite data directory, as the console
tests start it) with a tenant of 100 apps and 1,000 deployments, seeded through the platform:
the apps through ``AppService.register`` and the deployments through the platform's
``DeploymentStore`` (each with its steps), not by deploying 1,000 times. One app holds 100
deployments (its timeline pages by 20), the 99 others 9 each.

1. **Render time**: ``--requests`` GETs of the overview (100 apps: one page) and of the big
   app's page through the ASGI app in-process (httpx's ASGI transport, signed in with a
   console session cookie), after 20 warm-up requests; p50 and p99.
2. **Bytes per page**: each page's HTML plus the style sheet and the script it loads, as
   sent (the server does not compress) and gzip-compressed (level 6, what a proxy in front
   would send).
3. **Live update delay**: the same ASGI app served by uvicorn on ``--port`` with Debian's
   Chromium (Playwright) on the big app's page. ``--changes`` times: a step is written to the
   live deployment through the ``DeploymentStore`` (its DB timestamp) and the platform emits
   its ``Change`` (``ChangeFeed.emit``: the console's broadcast, the SSE stream, then the page
   fetches the timeline fragment); a ``MutationObserver`` in the page records when the step's
   text appears. The delay is that moment minus the step's ``at`` (the same machine clock,
   both in ms since the epoch); p50 and p99.

``--profile`` also prints a cProfile of 100 GETs of each page. Results are printed and appended to ``bench/RESULTS.md`` (with the machine's load) unless
``--no-append``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gzip
import os
import pstats
import re
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import httpx
import uvicorn
from playwright.async_api import async_playwright

from appdeck.app import Services
from appdeck.auth import scopes
from appdeck.auth.admin import IdentityAdmin
from appdeck.common.identity import Principal
from appdeck.console.context import Viewer
from appdeck.console.render import html
from appdeck.platform.changes import Change
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import states
from appdeck.platform.env import freeze
from appdeck.settings import Settings
from appdeck.storage import default_sqlite_url
from appdeck.tuning import tune_gc

ROOT: Final = Path(__file__).resolve().parents[1]
RESULTS: Final = ROOT / "bench" / "RESULTS.md"
CHROMIUM: Final = "/usr/bin/chromium"
CHROMIUM_ARGS: Final = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
PASSWORD: Final = "a bench password long enough"
TENANT: Final = "bench"
APPS: Final = 100
BIG: Final = 100
"""Deployments of the app whose page is measured."""
OTHERS: Final = 9
"""Deployments of each of the other 99 apps (100 + 99 x 9 = 991, about 1,000)."""
STEPS: Final = ["Building", "Starting the new release (rolling)", "Starting instance 1 of 1"]
CSRF: Final = re.compile(r'name="csrf" value="([^"]+)"')

_WATCH: Final = """() => {
  window.__seen = {};
  const look = () => {
    const el = document.getElementById("timeline");
    for (const m of (el.textContent.match(/bench-step-\\d+/g) || [])) {
      if (!(m in window.__seen)) window.__seen[m] = Date.now();
    }
  };
  new MutationObserver(look).observe(document.getElementById("timeline"),
    {childList: true, subtree: true, characterData: true});
  look();
}"""


def settings_for(root: Path, port: int) -> Settings:
    source = root / "src" / "hello"
    source.mkdir(parents=True, exist_ok=True)
    (source / "app.py").write_text("print('hi')\n")
    return Settings.model_validate(
        {
            "data_dir": root / "data",
            "database_url": default_sqlite_url(root),
            "source_roots": [root / "src"],
            "rate_limit_per_second": 0,
            "port": port,
            "tenant_disk_mb": 1_000_000,
            "tenant_memory_mb": 1_000_000,
            "tenant_instances": 10_000,
        }
    )


async def seed(services: Services, settings: Settings, principal: Principal) -> int:
    """100 apps, about 1,000 deployments: the id of the app with :data:`BIG` of them.

    Each deployment is created live (with the sealed env and the app's spec a real one has,
    never in progress: nothing tries to drive or reclaim it), gets its steps, and all but the
    newest of an app are superseded."""
    platform = services.platform
    assert platform is not None
    store = platform.deploys.store
    env = Sealer.from_settings(settings.secret_key, settings.data_dir).seal(freeze({}, []))
    big = 0
    for i in range(APPS):
        view = await platform.apps.register(principal, f"app-{i:03d}", description=f"App {i}")
        count = BIG if i == 0 else OTHERS
        big = big or view.app.id
        for n in range(count):
            last = n == count - 1
            record = await store.create(
                app_id=view.app.id,
                strategy="rolling",
                spec=view.app.spec,
                env=env,
                source={},
                created_by=principal.user,
                previous=None,
                instance_id="bench",
                state=states.LIVE,
            )
            for message in [*STEPS, f"Live: serves release {record.number}"]:
                record = await store.update(view.app.id, record.number, message=message)
            if not last:
                await store.update(view.app.id, record.number, state=states.SUPERSEDED, traffic=0)
    return big


async def sign_in(client: httpx.AsyncClient) -> None:
    page = await client.get("/console/signin")
    token = CSRF.search(page.text)
    assert token is not None
    answer = await client.post(
        "/console/signin",
        data={"tenant": TENANT, "username": "ada", "password": PASSWORD, "csrf": token.group(1)},
    )
    assert answer.status_code == 303, answer.text


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def render_times(client: httpx.AsyncClient, path: str, requests: int) -> list[float]:
    for _ in range(20):
        assert (await client.get(path)).status_code == 200
    took = []
    for _ in range(requests):
        started = time.perf_counter()
        answer = await client.get(path)
        took.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200
    return took


async def profile(client: httpx.AsyncClient, path: str) -> None:
    """cProfile of 100 GETs of ``path``: where the render time goes (printed)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(100):
        await client.get(path)
    profiler.disable()
    print(f"\n--- profile of 100 GETs of {path} (cumulative)")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(r"appdeck|jinja2|sqlalchemy", 30)


async def overview_phases(services: Services, principal: Principal, runs: int) -> dict[str, float]:
    """The overview's parts, each timed alone ``runs`` times (median ms): the platform's three
    reads (as ``views/overview.py`` makes them) and the template."""
    platform = services.platform
    assert platform is not None
    viewer = Viewer("bench", "x" * 32, principal, "ada", "admin")
    took: dict[str, list[float]] = {
        "apps.list_apps": [],
        "health.briefs": [],
        "deployments.latest": [],
        "template": [],
    }
    for _ in range(runs):
        t0 = time.perf_counter()
        views = (await platform.apps.list_apps(principal, offset=0, limit=101))[:100]
        t1 = time.perf_counter()
        health = await platform.health.briefs([v.app for v in views], traffic=True)
        t2 = time.perf_counter()
        latest = await platform.deployments.latest(views)
        t3 = time.perf_counter()
        rows = [{"view": v, "health": health[v.app.id], "last": latest[v.app.id]} for v in views]
        html(
            "overview.html",
            request_path="/console",
            viewer=viewer,
            title="Apps",
            rows=rows,
            offset=0,
            more=False,
            page_size=100,
            mcp_url="http://127.0.0.1/mcp",
            live="/console/events",
            nav_links=[],
        )
        t4 = time.perf_counter()
        for name, (a, b) in zip(took, [(t0, t1), (t1, t2), (t2, t3), (t3, t4)], strict=True):
            took[name].append((b - a) * 1000)
    return {name: statistics.median(values) for name, values in took.items()}


async def page_bytes(client: httpx.AsyncClient, path: str) -> tuple[int, int]:
    """(bytes as sent, gzip -6) of the page and the CSS and JS it loads."""
    parts = [(await client.get(path)).content]
    for asset in ("/console/static/console.css", "/console/static/console.js"):
        parts.append((await client.get(asset)).content)
    return sum(len(p) for p in parts), sum(len(gzip.compress(p, 6)) for p in parts)


async def live_delays(
    services: Services, port: int, app_id: int, cookie: str, changes: int
) -> list[float]:
    platform = services.platform
    assert platform is not None
    store = platform.deploys.store
    server = uvicorn.Server(
        uvicorn.Config(services.asgi(), host="127.0.0.1", port=port, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    delays: list[float] = []
    try:
        async with asyncio.timeout(30):
            while not server.started:  # noqa: ASYNC110  (uvicorn offers no event to wait on)
                await asyncio.sleep(0.05)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            context = await browser.new_context()
            context.set_default_timeout(15_000)
            await context.add_cookies(
                [{"name": "appdeck_console", "value": cookie, "url": f"http://127.0.0.1:{port}"}]
            )
            page = await context.new_page()
            await page.goto(f"http://127.0.0.1:{port}/console/apps/{app_id}")
            await page.locator("body[data-live-connected]").wait_for(state="attached")
            await page.evaluate(_WATCH)
            live = (await store.for_app(app_id, offset=0, limit=1))[0]
            for i in range(changes):
                marker = f"bench-step-{i}"
                record = await store.update(app_id, live.number, message=marker)
                await platform.feed.emit(
                    Change("deployment.updated", TENANT, app_id, deployment=record.number)
                )
                at_ms = record.steps[-1]["at"] * 1000
                await page.wait_for_function("(m) => m in window.__seen", arg=marker)
                shown = await page.evaluate("(m) => window.__seen[m]", marker)
                delays.append(float(shown) - at_ms)
            await browser.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)
    return delays


def git_state() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return head + (" (src modified)" if dirty else "")


async def measure(args: argparse.Namespace) -> str:
    root = Path(tempfile.mkdtemp(prefix="bench-console-"))
    load_start = os.getloadavg()
    settings = settings_for(root, args.port)
    services = await Services.start(settings)
    try:
        admin = IdentityAdmin(services.identities, services.token_issuer)
        await admin.create_tenant(TENANT)
        user = await admin.create_user(TENANT, "ada", PASSWORD, role="admin")
        principal = Principal(
            tenant=TENANT,
            user=user.id,
            scopes=scopes.ALL,
            kind="console",
            client_id="console",
            token_id="bench",
        )
        started = time.perf_counter()
        big = await seed(services, settings, principal)
        seeded_s = time.perf_counter() - started
        tune_gc()  # as `appdeck serve` does once started: without it, gen-2 pauses of ~90 ms
        # every second or two (the seeded heap rescanned) made the overview's p99 110 ms
        transport = httpx.ASGITransport(app=services.asgi())
        async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as client:
            await sign_in(client)
            pages = {"overview": "/console", "app page": f"/console/apps/{big}"}
            times = {
                name: await render_times(client, path, args.requests)
                for name, path in pages.items()
            }
            sizes = {name: await page_bytes(client, path) for name, path in pages.items()}
            if args.profile:
                for path in pages.values():
                    await profile(client, path)
            cookie = client.cookies["appdeck_console"]
        phases = await overview_phases(services, principal, 100)
        delays = await live_delays(services, args.port, big, cookie, args.changes)
    finally:
        await services.stop(stop_apps=True)
    load_end = os.getloadavg()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## Console (issue 24): render time, bytes per page, live update delay ({when})",
        "",
        f"**Machine:** {os.cpu_count()} CPUs, load average {load_start[0]:.2f} at the start, "
        f"{load_end[0]:.2f} at the end (other work on the machine). AppDeck {git_state()}, "
        f"`bench/console.py --requests {args.requests} --changes {args.changes}`; SQLite; a "
        f"tenant of {APPS} apps and {BIG + (APPS - 1) * OTHERS} deployments (the measured app "
        f"holds {BIG}), seeded in {seeded_s:.0f} s through the platform's services and stores.",
        "",
        "| page | render p50 | render p99 (goal <= 50 ms) | bytes (HTML+CSS+JS) | gzip -6 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in pages:
        t, (raw, packed) = times[name], sizes[name]
        lines.append(
            f"| {name} | {statistics.median(t):.1f} ms | {percentile(t, 99):.1f} ms "
            f"| {raw:,} | {packed:,} |"
        )
    lines += [
        "",
        "Where the overview's time goes (each part alone, median of 100): "
        + ", ".join(f"{name} {ms:.1f} ms" for name, ms in phases.items())
        + ".",
        "",
        f"Live update delay, a deployment step's DB timestamp to the browser's DOM showing it "
        f"(Chromium, {len(delays)} changes): p50 {statistics.median(delays):.0f} ms, "
        f"p99 {percentile(delays, 99):.0f} ms, max {max(delays):.0f} ms (goal p99 <= 500 ms).",
        "",
    ]
    return "\n".join(lines)


def append(section: str) -> None:
    text = RESULTS.read_text()
    head, sep, rest = text.partition("\n## ")
    RESULTS.write_text(f"{head}\n{section}\n{sep.lstrip(chr(10))}{rest}" if sep else text + section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--changes", type=int, default=60)
    parser.add_argument("--port", type=int, default=8944)
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--profile", action="store_true", help="print where render time goes")
    args = parser.parse_args()
    section = asyncio.run(measure(args))
    print(section)
    if not args.no_append:
        append(section)


if __name__ == "__main__":
    main()
