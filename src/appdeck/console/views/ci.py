"""``/console/apps/{id}/ci``: the app's CI configuration and its runs (newest first, a page at
a time, refreshed live: the CI service emits ``app.updated`` whenever a run starts, ends or
deploys), and ``/console/apps/{id}/ci/runs/{number}``: one run with its log.

The log is the one ``manage_ci logs`` shows: stored masked (the app's env values), at most
256 KiB; the page shows its last :data:`LOG_LINES` lines, control characters spelled out,
escaped. The configuration holds no secret (the repository's webhook secret is not part of
it, and is not shown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from appdeck.common.errors import NotFound
from appdeck.console import paging
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import page
from appdeck.console.shown import capped, summary, visible
from appdeck.console.views.app import app_context, app_id_of
from appdeck.platform.apps import AppView
from appdeck.platform.ci.service import CIConfigView, CIRunRecord

RUNS: Final = 20
"""Runs a page lists."""
LOG_LINES: Final = 1000
"""The last lines of a run's log a page shows (manage_ci logs: 200 by default, 5,000 at most)."""
LOG_CHARS: Final = 256 * 1024
"""And at most this many characters of them (the stored log's own bound)."""
MAX_RUN: Final = 2**63 - 1
SECTION: Final = "/ci"


@dataclass(frozen=True, slots=True)
class RunRow:
    run: CIRunRecord
    message: str
    status: str
    duration: str


def _number(request: Request) -> int:
    found = paging.number(str(request.path_params.get("number", "")), 19)
    if found is None or not 1 <= found <= MAX_RUN:
        raise NotFound("no such CI run", hint="the app's CI page lists its runs")
    return found


def duration(run: CIRunRecord) -> str:
    if run.started_at is None or run.finished_at is None:
        return "-"
    seconds = max(0, int(run.finished_at - run.started_at))
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def _row(run: CIRunRecord) -> RunRow:
    first = (run.message or "").splitlines()[0] if run.message else ""
    return RunRow(run, summary(first), summary(run.status_message), duration(run))


async def _config(console: Console, viewer: Viewer, app_id: int) -> CIConfigView | None:
    try:
        return await console.platform.ci.get(viewer.principal, app_id)
    except NotFound:  # the app is there (it was read first): CI is not configured
        return None


async def _runs(
    console: Console, viewer: Viewer, app_id: int, offset: int
) -> tuple[list[RunRow], bool]:
    found = await console.platform.ci.runs(viewer.principal, app_id, offset=offset, limit=RUNS + 1)
    return [_row(r) for r in found[:RUNS]], len(found) > RUNS


async def ci(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    offset = paging.offset(request)
    config = await _config(console, viewer, app_id)
    runs, more = await _runs(console, viewer, app_id, offset)
    return page(
        request,
        "app/ci.html",
        title=f"CI of {view.app.name}",
        config=config.config if config else None,
        command=summary(config.config.test_command, 4000) if config else "",
        **_runs_context(runs, more, offset),
        **app_context(view, viewer, app_id, SECTION),
    )


async def runs_fragment(request: Request, console: Console, viewer: Viewer) -> Response:
    """The runs table alone: what the live CI page fetches after a change."""
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    offset = paging.offset(request)
    runs, more = await _runs(console, viewer, app_id, offset)
    return page(
        request,
        "app/fragments/ci_runs.html",
        **_runs_context(runs, more, offset),
        **app_context(view, viewer, app_id, SECTION),
    )


def _runs_context(runs: list[RunRow], more: bool, offset: int) -> dict[str, Any]:
    return {"runs": runs, "more": more, "offset": offset, "page_size": RUNS}


def log_tail(log: str) -> tuple[str, bool]:
    """The log's last :data:`LOG_LINES` lines within :data:`LOG_CHARS`, made visible; and
    whether anything before them was left out."""
    lines = log.splitlines()
    shown = lines[-LOG_LINES:]
    text = "\n".join(shown)
    cut = len(shown) < len(lines)
    if len(text) > LOG_CHARS:
        text, cut = text[-LOG_CHARS:], True
    return visible(text, lines=True), cut


async def _run_context(
    request: Request, console: Console, viewer: Viewer
) -> tuple[AppView, dict[str, Any]]:
    app_id = app_id_of(request)
    number = _number(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    record = await console.platform.ci.run(viewer.principal, app_id, number)
    log, cut = log_tail(record.log)
    message, _ = capped(record.message or "", 2000)
    return view, {
        "row": _row(record),
        "message": visible(message, lines=True),
        "log": log,
        "log_cut": cut,
        "log_lines": LOG_LINES,
        **app_context(view, viewer, app_id, SECTION),
    }


async def run(request: Request, console: Console, viewer: Viewer) -> Response:
    view, context = await _run_context(request, console, viewer)
    title = f"CI run #{context['row'].run.number} of {view.app.name}"
    return page(request, "app/ci_run.html", title=title, **context)


async def run_fragment(request: Request, console: Console, viewer: Viewer) -> Response:
    """One run alone: what its live page fetches while it is queued or running (its log is
    kept when it ends)."""
    _, context = await _run_context(request, console, viewer)
    return page(request, "app/fragments/ci_run.html", **context)


ROUTES: Final[list[PageRoute]] = [
    ("/apps/{app_id}/ci", ci, GET),
    ("/apps/{app_id}/ci/runs/{number}", run, GET),
    ("/apps/{app_id}/fragments/ci-runs", runs_fragment, GET),
    ("/apps/{app_id}/fragments/ci-runs/{number}", run_fragment, GET),
]
