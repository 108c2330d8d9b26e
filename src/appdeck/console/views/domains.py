"""``/console/apps/{id}/domains``: where the app answers (``get_app_url``'s URLs, the public
one first), each custom domain of its spec with its state (verified and served, pending with
the TXT record to create, refused and why, the last lookup's error) and the certificates: the
public URL's (the health's ``tls``) and each verified domain's. Read only: proving a domain
(``verify``) stays with ``get_app_url``, which needs the right to change the spec."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import page
from appdeck.console.views.app import app_context, app_id_of


async def show(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.load(viewer.principal, app_id, "app.read")
    app = view.app
    domains = console.platform.domains
    health = await console.platform.health.status(viewer.principal, app_id)
    return page(
        request,
        "app/domains.html",
        title=f"Domains · {app.name}",
        urls=domains.urls.all(app.name, app.tenant_id),
        public=domains.urls.public_host(app.name, app.tenant_id),
        tls=health.tls,
        domains=await domains.describe(app),
        **app_context(view, viewer, app_id, "/domains"),
    )


ROUTES: Final[list[PageRoute]] = [("/apps/{app_id}/domains", show, GET)]
