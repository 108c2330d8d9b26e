"""The console's routes, under ``/console`` (:func:`console_app` is mounted there)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from appdeck.console.context import Console
from appdeck.console.guard import GET, POST, PageRoute, error_page, signed_in
from appdeck.console.views import (
    account,
    actions,
    apis,
    app,
    audit,
    ci,
    domains,
    env,
    events,
    logs,
    overview,
    repo,
    signin,
    tables,
    tenant,
)

STATIC: Final = Path(__file__).parent / "static"


def page_routes() -> list[PageRoute]:
    """Every signed-in page, (path below ``/console``, handler, methods): each view module
    lists its own in ``ROUTES``."""
    return [
        *overview.ROUTES,
        *events.ROUTES,
        *signin.ROUTES,
        *app.ROUTES,
        *actions.ROUTES,
        *logs.ROUTES,
        *env.ROUTES,
        *domains.ROUTES,
        *repo.ROUTES,
        *account.ROUTES,
        *tenant.ROUTES,
        *audit.ROUTES,
        *tables.ROUTES,
        *apis.ROUTES,
        *ci.ROUTES,
    ]


def console_routes(console: Console) -> list[BaseRoute]:
    """``/console`` itself (the overview) and everything below it."""
    overview_page = signed_in(console, overview.overview)
    return [Route("/console", overview_page, methods=GET), Mount("/console", console_app(console))]


def console_app(console: Console) -> Starlette:
    async def show_sign_in(request: Request) -> Response:
        return await signin.show(request, console)

    async def submit_sign_in(request: Request) -> Response:
        return await signin.submit(request, console)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_page(request, None, 404, "Not found", "There is no such page.")

    routes: list[BaseRoute] = [
        Route("/signin", show_sign_in, methods=GET),
        Route("/signin", submit_sign_in, methods=POST),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    routes += [
        Route(path, signed_in(console, handler), methods=methods)
        for path, handler, methods in page_routes()
    ]
    return Starlette(routes=routes, exception_handlers={404: not_found})
