"""``/console/apps/{id}/repo``: the app's connected repository as ``connect_repo get`` shows
it (URL, branch, last commit seen, auto deploy, polling, webhook path), and its hosted git
remote when the server hosts repositories. No secret is ever on this page: the webhook
secret was shown once at connect, the token only as "stored"; a URL is shown without any
user, password, query or fragment it may hold."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit, urlunsplit

from starlette.requests import Request
from starlette.responses import Response

from appdeck.common.errors import NotFound
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import page
from appdeck.console.views.app import app_context, app_id_of
from appdeck.platform.repos.service import RepoView
from appdeck.platform.repos.urls import HOSTED

MAX_MESSAGE: Final = 500
"""Characters of the last commit's message shown (it is the pusher's text)."""


def without_credentials(url: str) -> str:
    """``url`` with no ``user:password@``, query or fragment (a path stays as it is)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


async def show(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)  # a stranger: 404
    repo: RepoView | None
    try:
        repo = await console.platform.repos.get(viewer.principal, app_id)
    except NotFound:
        repo = None
    push_url = None
    hosting = console.platform.hosting
    if repo is not None and repo.url == HOSTED and hosting is not None:
        push_url = await hosting.push_url_of(app_id)
    message = (repo.last_message or "") if repo is not None else ""
    return page(
        request,
        "app/repo.html",
        title=f"Repository · {view.app.name}",
        repo=repo,
        url=None if repo is None else without_credentials(repo.url),
        hosted=repo is not None and repo.url == HOSTED,
        push_url=push_url,
        message=message[:MAX_MESSAGE] + (" [cut]" if len(message) > MAX_MESSAGE else ""),
        **app_context(view, viewer, app_id, "/repo"),
    )


ROUTES: Final[list[PageRoute]] = [("/apps/{app_id}/repo", show, GET)]
