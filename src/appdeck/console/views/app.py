"""``/console/apps/{id}``: one app, its health and instances, and its deployments as a
timeline (each step; a deploy in progress moves live)."""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from appdeck.common.errors import NotFound
from appdeck.console import paging
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import page
from appdeck.platform import access
from appdeck.platform.apps import AppView

TIMELINE: Final = 20
"""Deployments the timeline shows (newest first); older ones page."""
SECTIONS: Final[list[tuple[str, str]]] = [
    ("", "Overview"),
    ("/logs", "Logs"),
    ("/env", "Env"),
    ("/domains", "Domains"),
    ("/repo", "Repository"),
    ("/tables", "Tables"),
    ("/apis", "APIs"),
    ("/ci", "CI"),
]
"""The app's pages (path below ``/console/apps/{id}``, label): the app's navigation."""


def app_id_of(request: Request) -> int:
    raw = str(request.path_params.get("app_id", ""))
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise NotFound(f"no app {raw[:40]}")
    return int(raw)


def app_context(view: AppView, viewer: Viewer, app_id: int, section: str) -> dict[str, Any]:
    """What every page of one app shows around its content (header, navigation)."""
    return {
        "app": view,
        "app_id": app_id,
        "sections": SECTIONS,
        "section": section,
        "may": lambda action: access.allows(view.role, action),
        "viewer": viewer,
        "live": f"/console/apps/{app_id}/events",
    }


async def _timeline(
    console: Console, viewer: Viewer, app_id: int, offset: int
) -> tuple[list[object], bool]:
    found = await console.platform.deployments.list(
        viewer.principal, app_id, offset=offset, limit=TIMELINE + 1
    )
    return [d.record for d in found[:TIMELINE]], len(found) > TIMELINE


async def show(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    health = await console.platform.health.status(viewer.principal, app_id)
    offset = paging.offset(request)
    deployments, more = await _timeline(console, viewer, app_id, offset)
    return page(
        request,
        "app.html",
        title=view.app.name,
        health=health,
        deployments=deployments,
        offset=offset,
        more=more,
        **app_context(view, viewer, app_id, ""),
    )


async def timeline_fragment(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    offset = paging.offset(request)
    deployments, more = await _timeline(console, viewer, app_id, offset)
    return page(
        request,
        "fragments/timeline.html",
        deployments=deployments,
        offset=offset,
        more=more,
        **app_context(view, viewer, app_id, ""),
    )


async def health_fragment(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    health = await console.platform.health.status(viewer.principal, app_id)
    return page(
        request,
        "fragments/health.html",
        health=health,
        **app_context(view, viewer, app_id, ""),
    )


ROUTES: Final[list[PageRoute]] = [
    ("/apps/{app_id}", show, GET),
    ("/apps/{app_id}/fragments/timeline", timeline_fragment, GET),
    ("/apps/{app_id}/fragments/health", health_fragment, GET),
]
