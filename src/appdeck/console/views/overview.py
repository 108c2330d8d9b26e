"""``/console``: the viewer's apps with their live release, health, URL and last deploy."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from appdeck.console import paging
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import page

PAGE: Final = 100
"""Apps per overview page."""


async def _rows(
    console: Console, viewer: Viewer, offset: int
) -> tuple[list[dict[str, object]], bool]:
    platform = console.platform
    views = await platform.apps.list_apps(viewer.principal, offset=offset, limit=PAGE + 1)
    more = len(views) > PAGE
    views = views[:PAGE]
    health = await platform.health.briefs([v.app for v in views], traffic=True)
    latest = await platform.deployments.latest(views)
    rows = []
    for view in views:
        facts = health[view.app.id]
        last = latest.get(view.app.id)
        rows.append(
            {
                "view": view,
                "health": facts,
                "last": last,
            }
        )
    return rows, more


async def overview(request: Request, console: Console, viewer: Viewer) -> Response:
    offset = paging.offset(request)
    rows, more = await _rows(console, viewer, offset)
    return page(
        request,
        "overview.html",
        viewer=viewer,
        title="Apps",
        rows=rows,
        offset=offset,
        more=more,
        page_size=PAGE,
        mcp_url=console.mcp_url,
        live="/console/events",
    )


async def apps_fragment(request: Request, console: Console, viewer: Viewer) -> Response:
    """The apps table alone: what the live overview fetches after a change."""
    offset = paging.offset(request)
    rows, more = await _rows(console, viewer, offset)
    return page(
        request,
        "fragments/apps.html",
        viewer=viewer,
        rows=rows,
        offset=offset,
        more=more,
        page_size=PAGE,
    )


ROUTES: Final[list[PageRoute]] = [
    ("/", overview, GET),
    ("/fragments/apps", apps_fragment, GET),
]
