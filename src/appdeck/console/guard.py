"""Every console endpoint goes through here: who is signed in, the CSRF check of every form,
and the one mapping of platform errors to pages.

A form is read once, bounded (:data:`MAX_FORM_BYTES`, :data:`MAX_FIELDS`), and must carry the
session's CSRF token; a request whose ``Origin`` is not this server is refused as well.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import quote, urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from appdeck.auth import scopes
from appdeck.common.errors import (
    AppDeckError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    Unavailable,
)
from appdeck.common.identity import Principal
from appdeck.common.tokens import same
from appdeck.console.context import Console, Viewer
from appdeck.console.render import HEADERS, page
from appdeck.console.sessions import COOKIE

log = logging.getLogger("appdeck.console")

MAX_FORM_BYTES: Final = 64 * 1024
MAX_FIELDS: Final = 64
SIGN_IN: Final = "/console/signin"

Handler = Callable[[Request, Console, Viewer], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]
PageRoute = tuple[str, Handler, list[str]]
"""A signed-in page: (path below ``/console``, handler, methods)."""
GET: Final = ["GET"]
POST: Final = ["POST"]

_STATUS: Final[list[tuple[type[AppDeckError], int, str]]] = [
    (NotFound, 404, "Not found"),
    (PermissionDenied, 403, "Not allowed"),
    (InvalidArgument, 400, "Not accepted"),
    (Conflict, 409, "Not now"),
    (FailedPrecondition, 409, "Not now"),
    (QuotaExceeded, 429, "Over a limit"),
    (Unavailable, 503, "Unavailable"),
]


class FormRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_page(
    request: Request, viewer: Viewer | None, status: int, title: str, message: str
) -> Response:
    return page(request, "error.html", status=status, viewer=viewer, title=title, message=message)


def failure(request: Request, viewer: Viewer | None, exc: AppDeckError) -> Response:
    """The page for a platform error: the one place they become statuses."""
    for kind, status, title in _STATUS:
        if isinstance(exc, kind):
            text = exc.message if not exc.hint else f"{exc.message} ({exc.hint})"
            return error_page(request, viewer, status, title, text)
    log.error("console: %s", exc.message)
    return error_page(request, viewer, 500, "Something went wrong", "The request failed.")


def same_origin(request: Request) -> bool:
    """No ``Origin`` (an old browser, a form without one), or ours (its host is the Host)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    parts = urlsplit(origin)
    return origin != "null" and parts.netloc.lower() == host.lower()


async def read_form(request: Request) -> FormData:
    """The posted form, bounded; :class:`FormRefused` when too big, not a form or cross-site."""
    if not same_origin(request):
        raise FormRefused(403, "The form came from another site.")
    declared = request.headers.get("content-length")
    if (
        declared is None
        or not (declared.isascii() and declared.isdigit())
        or int(declared) > MAX_FORM_BYTES
    ):
        raise FormRefused(413, "The form is too large (or its length was not sent).")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise FormRefused(415, "Send the form as application/x-www-form-urlencoded.")
    try:
        return await request.form(max_files=0, max_fields=MAX_FIELDS)
    except Exception as exc:  # malformed body: the parser's own errors vary
        raise FormRefused(400, "The form could not be read.") from exc


def text(form: FormData, name: str, max_len: int = 200) -> str:
    value = form.get(name)
    if not isinstance(value, str):
        return ""
    if len(value) > max_len or "\x00" in value:
        raise FormRefused(400, f"The field {name} is too long or not text.")
    return value


def next_path(value: str | None) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if value and value.startswith("/console") and "//" not in value and "\\" not in value:
        return value[:500]
    return "/console"


def sign_in_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(
        f"{SIGN_IN}?next={quote(target, safe='/')}", status_code=303, headers=HEADERS
    )


async def viewer_of(console: Console, request: Request) -> Viewer | None:
    found = await console.sessions.find(request.cookies.get(COOKIE))
    if found is None:
        return None
    row, user = found
    principal = Principal(
        tenant=user.tenant_id,
        user=user.id,
        scopes=scopes.ALL,
        kind="console",
        client_id="console",
        token_id=row.id,
    )
    return Viewer(row.id, row.csrf, principal, user.name, user.role)


def signed_in(console: Console, handler: Handler) -> Endpoint:
    """``handler`` for a signed-in viewer: GETs without one go to the sign-in page; a POST
    must carry the session's CSRF token (the form is then on ``request.state.form``)."""

    async def endpoint(request: Request) -> Response:
        viewer = await viewer_of(console, request)
        if viewer is None:
            if request.method == "GET":
                return sign_in_redirect(request)
            return error_page(request, None, 401, "Signed out", "Sign in again, then retry.")
        if request.method == "POST":
            try:
                form = await read_form(request)
                if not same(text(form, "csrf", 100), viewer.csrf):
                    raise FormRefused(403, "The form could not be verified. Reload the page.")
            except FormRefused as exc:
                console.record(
                    "refused",
                    "denied",
                    f"POST {request.url.path}",
                    by=viewer.principal,
                    status=exc.status,
                    detail={"reason": "console_form"},
                )
                return error_page(request, viewer, exc.status, "Refused", exc.message)
            request.state.form = form
        try:
            return await handler(request, console, viewer)
        except AppDeckError as exc:
            return failure(request, viewer, exc)
        except FormRefused as exc:
            return error_page(request, viewer, exc.status, "Refused", exc.message)

    return endpoint
