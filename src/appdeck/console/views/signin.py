"""``/console/signin`` and ``/console/signout``.

The form is checked by the authorization server's own sign-in check (same users, throttles,
activity lines). Before a session exists, the form's CSRF token is a double submit: a random
value in a short-lived cookie and in the form, which must match.
"""

from __future__ import annotations

import secrets
from typing import Final

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from appdeck.auth.server.signin import Refused
from appdeck.common.tokens import same
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import (
    POST,
    FormRefused,
    PageRoute,
    error_page,
    next_path,
    read_form,
    text,
    viewer_of,
)
from appdeck.console.render import HEADERS, page
from appdeck.console.sessions import ABSOLUTE_S, COOKIE

PRE: Final = "appdeck_console_pre"
PRE_SECONDS: Final = 3600
BAD_LOGIN: Final = "Incorrect tenant, username or password."


def _set_pre(response: Response, value: str, secure: bool) -> None:
    response.set_cookie(
        PRE,
        value,
        max_age=PRE_SECONDS,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def _form(
    request: Request,
    console: Console,
    *,
    target: str,
    tenant: str = "",
    username: str = "",
    error: str | None = None,
    status: int = 200,
) -> Response:
    pre = request.cookies.get(PRE) or ""
    fresh = len(pre) != 32
    if fresh:
        pre = secrets.token_urlsafe(24)
    response = page(
        request,
        "signin.html",
        status=status,
        title="Sign in",
        csrf=pre,
        next=target,
        tenant=tenant,
        username=username,
        error=error,
    )
    if fresh:
        _set_pre(response, pre, console.secure)
    return response


async def show(request: Request, console: Console) -> Response:
    target = next_path(request.query_params.get("next"))
    if await viewer_of(console, request) is not None:
        return RedirectResponse(target, status_code=303, headers=HEADERS)
    tenant = request.cookies.get("appdeck_tenant", "")[:64]
    return _form(request, console, target=target, tenant=tenant)


async def submit(request: Request, console: Console) -> Response:
    try:
        form = await read_form(request)
        tenant = text(form, "tenant").strip()
        username = text(form, "username").strip()
        password = text(form, "password", 1024)
        target = next_path(text(form, "next", 500))
        csrf = text(form, "csrf", 100)
    except FormRefused as exc:
        return error_page(request, None, exc.status, "Refused", exc.message)
    pre = request.cookies.get(PRE) or ""
    if not csrf or not pre or not same(csrf, pre):
        console.record(
            "refused", "denied", "POST /console/signin", status=403, detail={"reason": "csrf"}
        )
        return _form(
            request,
            console,
            target=target,
            tenant=tenant,
            username=username,
            error="The form could not be verified. Try again.",
            status=403,
        )
    ip = request.client.host if request.client else None
    checked = await console.check_credentials(
        ip=ip, tenant=tenant, username=username, password=password
    )
    if isinstance(checked, Refused):
        if checked.reason == "throttled":
            message = f"Too many failed sign-in attempts. Try again in {checked.wait_s} seconds."
            status = 429
        else:
            message, status = BAD_LOGIN, 401
        console.record(
            "refused",
            "denied",
            "POST /console/signin",
            tenant_id=checked.user.tenant_id if checked.user else None,
            user_id=checked.user.id if checked.user else None,
            status=status,
            detail={"reason": checked.reason},
        )
        return _form(
            request,
            console,
            target=target,
            tenant=tenant,
            username=username,
            error=message,
            status=status,
        )
    secret, row = await console.sessions.sign_in(
        checked, ip=ip, user_agent=request.headers.get("user-agent")
    )
    console.record(
        "console_sign_in",
        "ok",
        "POST /console/signin",
        tenant_id=checked.tenant_id,
        user_id=checked.id,
        detail={"session": row.id},
    )
    response = RedirectResponse(target, status_code=303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        secret,
        max_age=int(ABSOLUTE_S),
        path="/console",
        httponly=True,
        samesite="lax",
        secure=console.secure,
    )
    response.delete_cookie(PRE, path="/console")
    return response


async def sign_out(request: Request, console: Console, viewer: Viewer) -> Response:
    await console.sessions.store.delete(viewer.principal.tenant, viewer.session_id)
    console.record(
        "console_sign_out",
        "ok",
        "POST /console/signout",
        by=viewer.principal,
        detail={"session": viewer.session_id},
    )
    response = RedirectResponse("/console/signin", status_code=303, headers=HEADERS)
    response.delete_cookie(COOKIE, path="/console")
    return response


ROUTES: Final[list[PageRoute]] = [("/signout", sign_out, POST)]
