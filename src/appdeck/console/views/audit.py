"""``/console/audit``: the tenant's audit log, newest first, filtered in a GET form by user,
app, tool or event and time, paged by id (keyset: "older" continues below the last row shown).

A member sees only their own rows; a tenant admin sees the tenant's (every user's, and the
refusals naming nobody). Never another tenant's: the store's read is per tenant. Every value
in a row may come from an attacker (a tool's name, a detail): autoescaped and cut short.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import Response

from appdeck.common.errors import InvalidArgument
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import cap, page
from appdeck.storage.audit import AuditFilter

PAGE: Final = 50
"""Rows per page (the store caps a page at 100)."""
MAX_ID: Final = 2**63 - 1
MAX_NAME: Final = 100
MAX_DETAIL: Final = 300
DAY: Final = 86_400.0


@dataclass(frozen=True, slots=True)
class Query:
    """The form's values as typed (shown back in the form) and what they filter."""

    user: str = ""
    app: str = ""
    name: str = ""
    since: str = ""
    until: str = ""

    def link(self, before: int | None = None) -> str:
        fields = self._fields()
        if before is not None:
            fields["before"] = str(before)
        return "/console/audit" + (f"?{urlencode(fields)}" if fields else "")

    def _fields(self) -> dict[str, str]:
        values = {
            "user": self.user,
            "app": self.app,
            "name": self.name,
            "since": self.since,
            "until": self.until,
        }
        return {k: v for k, v in values.items() if v}


def _text(request: Request, name: str, max_len: int = MAX_NAME) -> str:
    value = request.query_params.get(name, "").strip()
    if len(value) > max_len or not value.isprintable():
        raise InvalidArgument(f"the filter {name} is too long or not plain text")
    return value


def _number(value: str, name: str) -> int | None:
    if not value:
        return None
    if not value.isdigit() or len(value) > 19 or int(value) > MAX_ID:
        raise InvalidArgument(f"the filter {name} is not a number")
    return int(value)


def _day(value: str, name: str) -> float | None:
    if not value:
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise InvalidArgument(f"the filter {name} is not a date (YYYY-MM-DD)") from None
    return day.timestamp()


def _query(request: Request) -> Query:
    return Query(
        user=_text(request, "user"),
        app=_text(request, "app", 19),
        name=_text(request, "name"),
        since=_text(request, "since", 10),
        until=_text(request, "until", 10),
    )


async def _filter(console: Console, viewer: Viewer, query: Query) -> AuditFilter | None:
    """The store's filter; None when it can match nothing (an unknown user)."""
    principal = viewer.principal
    user_id: str | None = principal.user
    if viewer.admin:  # a tenant admin reads the tenant's rows (DESIGN.md §3)
        user_id = None
        if query.user:
            user = await console.identities.find_user(principal.tenant, query.user)
            if user is None:
                return None
            user_id = user.id
    since, until = _day(query.since, "since"), _day(query.until, "until")
    return AuditFilter(
        tenant_id=principal.tenant,
        user_id=user_id,
        app_id=_number(query.app, "app"),
        name=query.name or None,
        since=since,
        until=None if until is None else until + DAY,  # the whole "until" day
    )


def _row(row: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    detail = row.get("detail")
    shown = "" if detail is None else orjson.dumps(detail).decode(errors="replace")
    user = row.get("user_id")
    return {
        "id": row["id"],
        "ts": row["ts"],
        "user": cap(names.get(user, user) if isinstance(user, str) else "-", 80),
        "client": cap(row.get("client_id") or "-", 80),
        "event": cap(row.get("event"), 60),
        "tool": cap(row.get("tool") or "", 80),
        "action": cap(row.get("action") or "", 60),
        "app_id": row.get("app_id"),
        "outcome": cap(row.get("outcome"), 20),
        "status": row.get("status"),
        "method": cap(row.get("method") or "", 80),
        "detail": cap(shown, MAX_DETAIL),
    }


async def show(request: Request, console: Console, viewer: Viewer) -> Response:
    query = _query(request)
    before = _number(_text(request, "before", 19), "before")
    where = await _filter(console, viewer, query)
    found = (
        []
        if where is None
        else await console.audit_store.search(where, before_id=before, limit=PAGE + 1)
    )
    more = len(found) > PAGE
    names = {viewer.principal.user: viewer.username}
    if viewer.admin:
        names |= {
            u.id: u.name for u in await console.identities.list_users(viewer.principal.tenant)
        }
    rows = [_row(r, names) for r in found[:PAGE]]
    return page(
        request,
        "audit.html",
        viewer=viewer,
        title="Audit log",
        query=query,
        rows=rows,
        newer=query.link() if before is not None else None,
        older=query.link(rows[-1]["id"]) if more and rows else None,
    )


ROUTES: Final[list[PageRoute]] = [("/audit", show, GET)]
