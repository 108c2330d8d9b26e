"""``/console/apps/{id}/env``: the app's env var names (and which are secret), as
``env_vars list`` shows them, to viewers and up. The values are shown only to roles the
platform lets reveal them (``env.reveal``: admin and up), on request: a confirmation page,
then a POST whose answer shows them once (never cached) and is audited with how many names
were shown, never the values."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from appdeck.common.errors import PermissionDenied
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, POST, FormRefused, PageRoute, text
from appdeck.console.render import page
from appdeck.console.views.app import app_context, app_id_of

MAX_SHOWN: Final = 4096
"""Characters of one revealed value the page shows (the rest: ``env_vars get``)."""


async def show(request: Request, console: Console, viewer: Viewer) -> Response:
    return await _names(request, console, viewer, "app/env.html")


async def names_fragment(request: Request, console: Console, viewer: Viewer) -> Response:
    """The names table alone: the page fetches it again on ``env.updated``."""
    return await _names(request, console, viewer, "app/fragments/env_names.html")


async def _names(request: Request, console: Console, viewer: Viewer, template: str) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    names = await console.platform.env.list_vars(viewer.principal, app_id)
    return page(
        request,
        template,
        title=f"Env · {view.app.name}",
        names=sorted(names, key=lambda v: str(v["name"])),
        **app_context(view, viewer, app_id, "/env"),
    )


async def confirm(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.load(viewer.principal, app_id, "env.reveal")
    return page(
        request,
        "app/env_reveal.html",
        title=f"Show env values · {view.app.name}",
        values=None,
        **app_context(view, viewer, app_id, "/env"),
    )


async def reveal(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    if text(request.state.form, "confirm", 10) != "yes":
        raise FormRefused(400, "Showing the values was not confirmed.")
    view = await console.platform.apps.get(viewer.principal, app_id)  # a stranger: 404
    try:
        values = await console.platform.env.reveal(viewer.principal, app_id)
    except PermissionDenied:
        _audit(console, viewer, app_id, None)
        raise
    _audit(console, viewer, app_id, len(values))
    shown = [
        {
            "name": v["name"],
            "secret": v["secret"],
            "value": str(v["value"])[:MAX_SHOWN],
            "cut": len(str(v["value"])) - MAX_SHOWN,
        }
        for v in sorted(values, key=lambda v: str(v["name"]))
    ]
    return page(  # render.HEADERS: Cache-Control no-store
        request,
        "app/env_reveal.html",
        title=f"Env values · {view.app.name}",
        values=shown,
        **app_context(view, viewer, app_id, "/env"),
    )


def _audit(console: Console, viewer: Viewer, app_id: int, count: int | None) -> None:
    console.record(
        "console_action",
        "ok" if count is not None else "denied",
        f"POST /console/apps/{app_id}/env/reveal",
        by=viewer.principal,
        action="env.reveal",
        app_id=app_id,
        detail={"names": count} if count is not None else None,
    )


ROUTES: Final[list[PageRoute]] = [
    ("/apps/{app_id}/env", show, GET),
    ("/apps/{app_id}/fragments/env", names_fragment, GET),
    ("/apps/{app_id}/env/reveal", confirm, GET),
    ("/apps/{app_id}/env/reveal", reveal, POST),
]
