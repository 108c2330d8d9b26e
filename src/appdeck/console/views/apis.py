"""``/console/apps/{id}/apis``: the app's API as the catalogue keeps it (the latest discovered
OpenAPI document: title, versions, its operations a page at a time) and the app's API keys
(name, scopes, created, last use, state; never a key's value or hash).

The document is the app's text: titles, paths and summaries are capped and their invisible
characters spelled out (:mod:`appdeck.console.shown`). The keys are ``manage_api_key list``:
the platform lets an app's admins read them (``api.keys``); anyone else sees that they may
not, as the platform says. test_api keeps no results, so there are none to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from appdeck.common.errors import NotFound, PermissionDenied
from appdeck.console import paging
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import page
from appdeck.console.shown import summary
from appdeck.console.views.app import app_context, app_id_of
from appdeck.platform.apis.documents import ApiDocument
from appdeck.platform.apis.keys import ApiKey
from appdeck.platform.apis.operations import operations

OPERATIONS: Final = 50
"""Operations a page lists."""
KEYS: Final = 50
"""API keys a page lists (an app has at most 50 active ones, revoked ones besides)."""
SECTION: Final = "/apis"
PATH_CHARS: Final = 300


@dataclass(frozen=True, slots=True)
class OperationRow:
    method: str
    path: str
    operation_id: str
    summary: str


@dataclass(frozen=True, slots=True)
class KeysShown:
    keys: list[ApiKey]
    more: bool
    refused: str | None
    """Why the keys are not shown (the platform's refusal), when they are not."""
    enforced: bool


async def _document(console: Console, viewer: Viewer, app_id: int) -> ApiDocument | None:
    try:
        return await console.platform.apis.catalog.latest(viewer.principal, app_id)
    except NotFound:  # the app is there (it was read first): nothing discovered yet
        return None


def _operations(doc: ApiDocument, offset: int) -> tuple[list[OperationRow], int]:
    found = operations(doc.document)
    rows = [
        OperationRow(
            op.method,
            summary(op.path, PATH_CHARS),
            summary(op.operation_id),
            summary(op.summary),
        )
        for op in found[offset : offset + OPERATIONS]
    ]
    return rows, len(found)


async def _keys(console: Console, viewer: Viewer, app_id: int, offset: int) -> KeysShown:
    keys = console.platform.apis.keys
    try:
        found = await keys.list(viewer.principal, app_id, offset=offset, limit=KEYS + 1)
        enforced = await keys.enforced(viewer.principal, app_id)
    except PermissionDenied as exc:
        return KeysShown([], False, exc.message, False)
    return KeysShown(found[:KEYS], len(found) > KEYS, None, enforced)


async def apis(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    doc = await _document(console, viewer, app_id)
    ops_offset = paging.offset(request, "ops")
    rows, total = _operations(doc, ops_offset) if doc is not None else ([], 0)
    keys_offset = paging.offset(request, "keys")
    return page(
        request,
        "app/apis.html",
        title=f"APIs of {view.app.name}",
        doc=doc,
        title_shown=summary(doc.title) if doc else "",
        api_version=summary(doc.api_version) if doc else "",
        source=summary(doc.source) if doc else "",
        operations=rows,
        total=total,
        ops_offset=ops_offset,
        ops_page=OPERATIONS,
        keys=await _keys(console, viewer, app_id, keys_offset),
        keys_offset=keys_offset,
        keys_page=KEYS,
        **app_context(view, viewer, app_id, SECTION),
    )


ROUTES: Final[list[PageRoute]] = [
    ("/apps/{app_id}/apis", apis, GET),
]
