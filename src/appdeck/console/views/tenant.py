"""``/console/tenant``: the tenant's people and clients, read-only (membership changes stay in
``manage_app``).

Everyone sees, for each app they can see, its members and their roles (the platform's
``members`` read, as the viewer: its role checks decide). A tenant admin (DESIGN.md §3: owner
of every app) also sees the tenant's users with their tenant roles, and the OAuth clients
registered in the tenant (machine clients and apps' own clients); a member sees neither.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from appdeck.console import paging
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import page

APPS: Final = 20
"""Apps per page (each with its members)."""
MAX_USERS: Final = 500
MAX_CLIENTS: Final = 200
MAX_MEMBERS: Final = 200


async def show(request: Request, console: Console, viewer: Viewer) -> Response:
    principal = viewer.principal
    offset = paging.offset(request)
    views = await console.platform.apps.list_apps(principal, offset=offset, limit=APPS + 1)
    more = len(views) > APPS
    apps: list[tuple[Any, list[dict[str, Any]]]] = []
    for view in views[:APPS]:
        members = await console.platform.apps.members(principal, view.app.id)
        apps.append((view, members[:MAX_MEMBERS]))
    users, clients = [], []
    if viewer.admin:
        users = (await console.identities.list_users(principal.tenant))[:MAX_USERS]
        clients = await console.account.oauth.tenant_clients(principal.tenant, limit=MAX_CLIENTS)
    return page(
        request,
        "tenant.html",
        viewer=viewer,
        title="Tenant",
        apps=apps,
        offset=offset,
        more=more,
        page_size=APPS,
        users=users,
        clients=clients,
        max_users=MAX_USERS,
        max_clients=MAX_CLIENTS,
    )


ROUTES: Final[list[PageRoute]] = [("/tenant", show, GET)]
