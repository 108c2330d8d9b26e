"""``/console/account``: the signed-in user, their personal access tokens, their OAuth grants and
their live sessions (MCP and console), each revocable behind a confirmation page.

A revocation here is the one the rest of the server makes: a PAT as ``/revoke`` and ``appdeck
token revoke`` (the row, then this process's cache and the other replicas told); a grant as
``appdeck grant revoke`` (its refresh-token families and their live access tokens, refused here
at once and broadcast); an MCP session as ``DELETE /mcp`` (its streams close, on every
replica); a console session by deleting its row (that browser is signed out at its next
request). Only the viewer's own: anything else, another user's or another tenant's, is a 404.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from appdeck import activity
from appdeck.common.errors import NotFound
from appdeck.console.context import Console, McpSession, Viewer
from appdeck.console.guard import GET, POST, FormRefused, PageRoute, text
from appdeck.console.render import HEADERS, ago, cap, page
from appdeck.console.sessions import COOKIE
from appdeck.storage.console_sessions import ConsoleSessionRow
from appdeck.storage.identity import PersonalTokenRecord
from appdeck.storage.oauth import GrantRow

MAX_ROWS: Final = 200
"""Rows one table of the page shows at most (PATs, grants, sessions: each capped far lower
by the platform; this bounds the page whatever the tables hold)."""
MAX_ID: Final = 2048
"""The longest id a revocation accepts (URL client ids are long)."""


def _client_of(session: McpSession) -> str:
    info = session.client_info if isinstance(session.client_info, dict) else {}
    name, version = info.get("name"), info.get("version")
    label = " ".join(str(part) for part in (name, version) if part)
    return cap(label or "unnamed client")


async def _pats(console: Console, viewer: Viewer) -> list[PersonalTokenRecord]:
    p = viewer.principal
    rows = await console.identities.list_pats(p.tenant, p.user)
    return [r for r in rows if r.revoked_at is None][-MAX_ROWS:][::-1]


async def _grants(console: Console, viewer: Viewer) -> list[GrantRow]:
    p = viewer.principal
    return (await console.account.oauth.list_grants(p.tenant, p.user))[:MAX_ROWS]


async def _console_sessions(console: Console, viewer: Viewer) -> list[ConsoleSessionRow]:
    p = viewer.principal
    return await console.sessions.store.for_user(p.tenant, p.user, time.time())


async def show(request: Request, console: Console, viewer: Viewer) -> Response:
    p = viewer.principal
    grants = await _grants(console, viewer)
    names = {}
    for grant in grants:
        client = await console.account.oauth.get_client(grant.client_id)
        names[grant.client_id] = cap(client.name if client and client.name else "-")
    mcp = list(await console.account.mcp_sessions(p.tenant, p.user))[:MAX_ROWS]
    now = time.time()
    return page(
        request,
        "account.html",
        viewer=viewer,
        title="Account",
        pats=await _pats(console, viewer),
        grants=grants,
        client_names=names,
        mcp_sessions=[(s, _client_of(s)) for s in mcp],
        console_sessions=await _console_sessions(console, viewer),
        now=now,
        done=KINDS.get(request.query_params.get("done", "")),
    )


# -- revocations ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kind:
    label: str
    """The button's words."""
    action: str
    """The audit row's ``action``."""
    find: Callable[[Console, Viewer, str], Coroutine[Any, Any, str]]
    """What the confirmation page names (raises NotFound when not the viewer's)."""
    revoke: Callable[[Console, Viewer, str], Coroutine[Any, Any, dict[str, Any]]]
    """Do it; the audit row's detail."""
    done: str


async def _find_pat(console: Console, viewer: Viewer, pat_id: str) -> str:
    record = await _own_pat(console, viewer, pat_id)
    return f"the personal access token “{cap(record.name)}” (scopes {' '.join(record.scopes)})"


async def _own_pat(console: Console, viewer: Viewer, pat_id: str) -> PersonalTokenRecord:
    record = await console.identities.get_pat(pat_id) if len(pat_id) <= 64 else None
    p = viewer.principal
    if (
        record is None
        or record.revoked_at is not None
        or (record.tenant_id, record.user_id) != (p.tenant, p.user)
    ):
        raise NotFound("no such token of yours")
    return record


async def _revoke_pat(console: Console, viewer: Viewer, pat_id: str) -> dict[str, Any]:
    record = await _own_pat(console, viewer, pat_id)
    if await console.identities.revoke_pat(record.id):
        console.account.forget_pat(record)
        activity.token_revoked(
            kind="pat",
            tenant=record.tenant_id,
            user=record.user_id,
            client=None,
            token_id=record.id,
        )
    return {"pat_id": record.id}


async def _own_grant(console: Console, viewer: Viewer, client_id: str) -> GrantRow:
    for grant in await _grants(console, viewer):
        if grant.client_id == client_id:
            return grant
    raise NotFound("no such grant of yours")


async def _find_grant(console: Console, viewer: Viewer, client_id: str) -> str:
    grant = await _own_grant(console, viewer, client_id)
    client = await console.account.oauth.get_client(grant.client_id)
    name = client.name if client is not None and client.name else grant.client_id
    return f"what you granted the client “{cap(name)}” (scopes {cap(grant.scope, 400)})"


async def _revoke_grant(console: Console, viewer: Viewer, client_id: str) -> dict[str, Any]:
    grant = await _own_grant(console, viewer, client_id)
    p = viewer.principal
    live = await console.account.oauth.revoke_grants(
        client_id=grant.client_id, tenant_id=p.tenant, user_id=p.user
    )
    for jti, expires_at in live:
        await console.account.revoke_jti(jti, expires_at)
    activity.token_revoked(
        kind="refresh_token", tenant=p.tenant, user=p.user, client=grant.client_id, token_id=None
    )
    return {"client": cap(grant.client_id, 200), "access_revoked": len(live)}


async def _own_mcp(console: Console, viewer: Viewer, session_id: str) -> McpSession:
    p = viewer.principal
    for session in await console.account.mcp_sessions(p.tenant, p.user):
        if session.id == session_id:
            return session
    raise NotFound("no such session of yours")


async def _find_mcp(console: Console, viewer: Viewer, session_id: str) -> str:
    session = await _own_mcp(console, viewer, session_id)
    return f"the MCP session of {_client_of(session)} (started {ago(session.created_at)})"


async def _end_mcp(console: Console, viewer: Viewer, session_id: str) -> dict[str, Any]:
    p = viewer.principal
    if not await console.account.end_mcp_session(p.tenant, p.user, session_id):
        raise NotFound("no such session of yours")
    return {"session": session_id[:12]}


async def _own_console(console: Console, viewer: Viewer, session_id: str) -> ConsoleSessionRow:
    for row in await _console_sessions(console, viewer):
        if row.id == session_id:
            return row
    raise NotFound("no such session of yours")


async def _find_console(console: Console, viewer: Viewer, session_id: str) -> str:
    row = await _own_console(console, viewer, session_id)
    which = "this browser's session" if row.id == viewer.session_id else "the console session"
    return f"{which} from {cap(row.ip or 'an unknown address')} ({cap(row.user_agent or '-')})"


async def _end_console(console: Console, viewer: Viewer, session_id: str) -> dict[str, Any]:
    row = await _own_console(console, viewer, session_id)
    p = viewer.principal
    if not await console.sessions.store.delete(p.tenant, row.id, p.user):
        raise NotFound("no such session of yours")
    return {"session": row.id}


KINDS: Final[dict[str, Kind]] = {
    "token": Kind("Revoke token", "token.revoke", _find_pat, _revoke_pat, "Token revoked."),
    "grant": Kind("Revoke grant", "grant.revoke", _find_grant, _revoke_grant, "Grant revoked."),
    "mcp-session": Kind(
        "End session", "mcp_session.end", _find_mcp, _end_mcp, "MCP session ended."
    ),
    "console-session": Kind(
        "Sign out session",
        "console_session.revoke",
        _find_console,
        _end_console,
        "Console session signed out.",
    ),
}


def _kind(request: Request) -> tuple[str, Kind]:
    name = str(request.path_params.get("kind", ""))
    kind = KINDS.get(name)
    if kind is None:
        raise NotFound(f"nothing to revoke called {cap(name, 40)}")
    return name, kind


def _id(raw: str | None) -> str:
    if not raw or len(raw) > MAX_ID or "\x00" in raw:
        raise NotFound("no such thing of yours")
    return raw


async def confirm(request: Request, console: Console, viewer: Viewer) -> Response:
    name, kind = _kind(request)
    target = _id(request.query_params.get("id"))
    what = await kind.find(console, viewer, target)
    return page(
        request,
        "account_confirm.html",
        viewer=viewer,
        title=kind.label,
        kind=kind,
        kind_name=name,
        what=what,
        target=target,
    )


async def perform(request: Request, console: Console, viewer: Viewer) -> Response:
    name, kind = _kind(request)
    form = request.state.form
    if text(form, "confirm", 10) != "yes":
        raise FormRefused(400, "The revocation was not confirmed.")
    target = _id(text(form, "id", MAX_ID))
    detail = await kind.revoke(console, viewer, target)
    console.record(
        "console_action",
        "ok",
        f"POST /console/account/revoke/{name}",
        by=viewer.principal,
        action=kind.action,
        detail=detail,
    )
    if name == "console-session" and target == viewer.session_id:  # signed this browser out
        response = RedirectResponse("/console/signin", status_code=303, headers=HEADERS)
        response.delete_cookie(COOKIE, path="/console")
        return response
    return RedirectResponse(
        f"/console/account?done={quote(name)}", status_code=303, headers=HEADERS
    )


ROUTES: Final[list[PageRoute]] = [
    ("/account", show, GET),
    ("/account/revoke/{kind}", confirm, GET),
    ("/account/revoke/{kind}", perform, POST),
]
