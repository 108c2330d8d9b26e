"""``/console/apps/{id}/tables``: the tables of the app's own database, as ``manage_table
list`` shows them, and one table's schema with its rows, read-only, a page at a time (the
``records list`` call, keyset-paged by its cursor).

Rows are whatever the app's users wrote: every cell goes through :func:`shown.cell` (at most
200 characters, control characters spelled out) and the template's autoescaping. A table name
in a URL is checked before anything is asked: one that is not a valid name, or not one of the
app's tables, is a 404, exactly as another tenant's app is.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from appdeck.common.errors import FailedPrecondition, InvalidArgument, NotFound
from appdeck.console import paging
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute
from appdeck.console.render import page
from appdeck.console.shown import CELL_CHARS, cell, summary
from appdeck.console.views.app import app_context, app_id_of
from appdeck.platform.tables import names
from appdeck.platform.tables.catalog import Column
from appdeck.platform.tables.records_service import ListQuery

TABLES: Final = 50
"""Tables a page lists."""
ROWS: Final = 25
"""Rows a page shows at most (the service's own limit is 500; its result size bound holds)."""
CELLS: Final = 1000
"""Cells a page shows at most: a wide table shows fewer rows (5 at least)."""
SHOWN_CHARS: Final = 60_000
"""Characters of all cells of a page at most: a wide table's cells are cut shorter (at 40 at
least, at :data:`shown.CELL_CHARS` at most), so a page stays a few hundred KiB."""
MAX_CURSOR: Final = 4096
"""A row cursor longer than this is not one the service made."""
SECTION: Final = "/tables"


def table_of(request: Request) -> str:
    """The table named in the URL, when it is a valid name at all (else 404)."""
    raw = str(request.path_params.get("table", ""))
    if not names.is_valid(raw):
        raise NotFound("no such table", hint="the app's Tables page lists them")
    return raw


def _cursor(request: Request) -> str | None:
    raw = request.query_params.get("after")
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_CURSOR or not raw.isascii() or not raw.isprintable():
        raise InvalidArgument("after: not a cursor of this table's rows")
    return raw


async def tables(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    offset = paging.offset(request)
    found = await console.platform.tables.list(
        viewer.principal, app_id, offset=offset, limit=TABLES + 1
    )
    return page(
        request,
        "app/tables.html",
        title=f"Tables of {view.app.name}",
        tables=found[:TABLES],
        more=len(found) > TABLES,
        offset=offset,
        page_size=TABLES,
        **app_context(view, viewer, app_id, SECTION),
    )


async def table(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    name = table_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)
    schema = await console.platform.tables.describe(viewer.principal, app_id, name)
    after = _cursor(request)
    size, chars = page_shape(len(schema.columns))
    rows: list[list[Any]] = []
    next_cursor = None
    unreadable = None
    capped = False
    try:
        found = await console.platform.records.list(
            viewer.principal, app_id, name, ListQuery(cursor=after, limit=size)
        )
    except FailedPrecondition as exc:  # a table the app made itself, without an integer id
        unreadable = exc.message
    else:
        shown = [c.name for c in schema.columns]
        rows = [[cell(row.get(c), chars) for c in shown] for row in found.rows]
        next_cursor, capped = found.next_cursor, found.capped
    return page(
        request,
        "app/table.html",
        title=f"Table {schema.name} of {view.app.name}",
        schema=schema,
        defaults={c.name: _default(c) for c in schema.columns},
        rows=rows,
        after=after,
        next_cursor=next_cursor,
        capped=capped,
        unreadable=unreadable,
        page_size=size,
        cell_chars=chars,
        **app_context(view, viewer, app_id, SECTION),
    )


def page_shape(columns: int) -> tuple[int, int]:
    """Rows a page of a table with ``columns`` columns shows, and characters a cell shows."""
    rows = max(5, min(ROWS, CELLS // max(1, columns)))
    return rows, max(40, min(CELL_CHARS, SHOWN_CHARS // (rows * max(1, columns))))


def _default(column: Column) -> str:
    """A column's default (the app's data, or its own SQL), as a cell shows it."""
    if column.default_sql:
        return summary(column.default_sql)
    return cell(column.default).text


ROUTES: Final[list[PageRoute]] = [
    ("/apps/{app_id}/tables", tables, GET),
    ("/apps/{app_id}/tables/{table}", table, GET),
]
