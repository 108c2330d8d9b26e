"""RecordService: the rows of an app's tables (insert, get, update, delete, upsert, count,
list) and full-text search, each in one transaction on the app's own database.

Every call: the caller's role on the app (``table.read`` / ``table.write``), then the table's
schema read back in the same transaction (the app may change it at any time), then values
checked against it (:mod:`values`: an error names the row and the field) and bound. Identifiers
come only from that schema, after validation (:mod:`names`), and are always quoted. An update
or delete needs an id or a filter: there is no unfiltered one. Rows are not resources, so no
change event is emitted for them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from appdeck.common.errors import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService
from appdeck.platform.tables import (
    catalog,
    filters,
    guard,
    limits,
    names,
    results,
    search,
    values,
    writes,
)
from appdeck.platform.tables.catalog import Column, Databases, TableSchema
from appdeck.platform.tables.filters import bound

Dialect = Literal["sqlite", "postgresql"]
T = TypeVar("T")

MAX_SEARCH_OFFSET: Final = 10_000


@dataclass(frozen=True, slots=True)
class ListQuery:
    filter: Any = None
    sort: Any = None
    cursor: str | None = None
    columns: Any = None
    limit: int = limits.LIST_DEFAULT


@dataclass(frozen=True, slots=True)
class RowPage:
    rows: list[dict[str, Any]]
    next_cursor: str | None = None
    capped: bool = False
    """The page stopped before ``limit`` rows because of :data:`results.RESULT_BYTES`."""


@dataclass(frozen=True, slots=True)
class Hit:
    row: dict[str, Any]
    rank: float
    snippet: str


@dataclass(frozen=True, slots=True)
class SearchPage:
    hits: list[Hit] = field(default_factory=list)
    next_cursor: str | None = None
    capped: bool = False


class RecordService:
    def __init__(
        self,
        apps: AppService,
        databases: Databases,
        *,
        timeout_s: float = limits.QUERY_TIMEOUT_S,
    ) -> None:
        self._apps = apps
        self._db = databases
        self._timeout_s = timeout_s

    @property
    def dialect(self) -> Dialect:
        return self._db.dialect

    # -- writes ----------------------------------------------------------------------------

    async def insert(self, principal: Principal, app_id: int, table: str, rows: Any) -> list[int]:
        """Insert 1 to 1,000 rows; their ids, in order. All or nothing."""
        await self._apps.load(principal, app_id, "table.write")
        async with self._tx(app_id) as conn:
            schema = await self._writable(conn, table)
            prepared = writes.prepare_rows(rows, schema, self.dialect, key=None)
            return await writes.insert(conn, schema, self.dialect, prepared, on=None)

    async def upsert(
        self, principal: Principal, app_id: int, table: str, rows: Any, on: str
    ) -> list[int]:
        """Insert rows, or update the row that has the same value of ``on`` (id or a unique
        column). Their ids, in order."""
        await self._apps.load(principal, app_id, "table.write")
        async with self._tx(app_id) as conn:
            schema = await self._writable(conn, table)
            key = writes.unique_key(schema, on)
            prepared = writes.prepare_rows(rows, schema, self.dialect, key=key)
            ids = await writes.insert(conn, schema, self.dialect, prepared, on=key)
            if key.name == names.ID and self.dialect == "postgresql":
                await writes.advance_identity(conn, schema)
            return ids

    async def update(
        self,
        principal: Principal,
        app_id: int,
        table: str,
        changes: Any,
        *,
        id: int | None = None,
        filter: Any = None,
    ) -> int:
        """Set ``changes`` on the row ``id`` or on the rows matching ``filter``; how many."""
        await self._apps.load(principal, app_id, "table.write")
        async with self._tx(app_id) as conn:
            schema = await self._writable(conn, table)
            target = filters.table_of(schema)
            cond = writes.required_target(schema, target, self.dialect, id, filter, "update")
            sets = writes.prepare_changes(changes, schema, self.dialect)
            stmt = sa.update(target).where(cond).values({target.c[k]: v for k, v in sets.items()})
            return int((await conn.execute(stmt)).rowcount)

    async def delete(
        self,
        principal: Principal,
        app_id: int,
        table: str,
        *,
        id: int | None = None,
        filter: Any = None,
    ) -> int:
        """Delete the row ``id`` or the rows matching ``filter``; how many."""
        await self._apps.load(principal, app_id, "table.write")
        async with self._tx(app_id) as conn:
            schema = await self._writable(conn, table)
            target = filters.table_of(schema)
            cond = writes.required_target(schema, target, self.dialect, id, filter, "delete")
            return int((await conn.execute(sa.delete(target).where(cond))).rowcount)

    # -- reads -----------------------------------------------------------------------------

    async def get(
        self, principal: Principal, app_id: int, table: str, id: int, columns: Any = None
    ) -> dict[str, Any]:
        await self._apps.load(principal, app_id, "table.read")
        async with self._tx(app_id, readonly=True) as conn:
            schema = await self._schema(conn, table)
            target = filters.table_of(schema)
            shown = filters.projection(columns, schema)
            ident = values.to_storage(id, "integer", self.dialect, field="id")
            stmt = sa.select(*[filters.readable(target, c, self.dialect) for c in shown]).where(
                target.c[names.ID] == bound(ident)
            )
            found = (await conn.execute(stmt)).first()
        if found is None:
            raise NotFound(f"table {schema.name} has no row with id {id}", field="id")
        return results.fit(_row_out(shown, found))

    async def count(self, principal: Principal, app_id: int, table: str, filter: Any = None) -> int:
        await self._apps.load(principal, app_id, "table.read")
        async with self._tx(app_id, readonly=True) as conn:
            schema = await self._schema(conn, table)
            target = filters.table_of(schema)
            stmt = sa.select(sa.func.count()).select_from(target)
            cond = filters.where(filter, schema, target, self.dialect)
            if cond is not None:
                stmt = stmt.where(cond)
            return int((await conn.execute(stmt)).scalar_one())

    async def list(
        self, principal: Principal, app_id: int, table: str, query: ListQuery
    ) -> RowPage:
        """A page of rows in the query's order, after the cursor's row."""
        await self._apps.load(principal, app_id, "table.read")
        limit = _limit(query.limit)
        async with self._tx(app_id, readonly=True) as conn:
            schema = await self._schema(conn, table)
            target = filters.table_of(schema)
            keys = filters.sort_keys(query.sort, schema)
            shown = filters.projection(query.columns, schema)
            cond = filters.where(query.filter, schema, target, self.dialect)
            sort_spec = [[k.column.name, k.descending] for k in keys]
            qhash = filters.query_hash("list", app_id, schema.name, query.filter, sort_spec)
            # by name: a Column is not hashable when its default is a list or an object
            read = tuple({c.name: c for c in [*shown, *(k.column for k in keys)]}.values())
            # the page's ids first, then its rows: only they are read in full
            ident = target.c[names.ID]
            page = sa.select(ident)
            if cond is not None:
                page = page.where(cond)
            if query.cursor is not None:
                position = filters.decode_cursor(query.cursor, qhash)
                last = filters.stored_position(keys, position, self.dialect)
                page = page.where(filters.after(keys, last, target))
            ids = page.order_by(*filters.order_by(keys, target)).limit(limit + 1).subquery("page")
            stmt = (
                sa.select(*[filters.readable(target, c, self.dialect) for c in read])
                .select_from(target.join(ids, ids.c[names.ID] == ident))
                .order_by(*filters.order_by(keys, target))
            )
            wanted = {c.name for c in shown}

            def make(raw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
                row = _row_out(read, raw)
                return row, results.fit(_only(row, wanted))

            got = await results.read_page(
                conn, stmt, limit, make, size=lambda item: results.size_of(item[1])
            )
        cursor = None
        if got.more and got.items:
            final = got.items[-1][0]
            cursor = filters.encode_cursor(qhash, filters.key_position(keys, final))
        return RowPage([shown_row for _, shown_row in got.items], cursor, got.capped)

    async def search(
        self,
        principal: Principal,
        app_id: int,
        table: str,
        text: Any,
        *,
        filter: Any = None,
        columns: Any = None,
        cursor: str | None = None,
        limit: int = limits.LIST_DEFAULT,
    ) -> SearchPage:
        """The rows whose full-text columns match ``text``, best first, with highlights."""
        await self._apps.load(principal, app_id, "table.read")
        query = search.checked_query(text)
        limit = _limit(limit)
        async with self._tx(app_id, readonly=True) as conn:
            schema = await self._schema(conn, table)
            if not schema.fulltext:
                raise FailedPrecondition(
                    f"table {schema.name} has no full-text columns",
                    hint="add some with alter_table (add_fulltext), then search",
                    field="table",
                )
            target = filters.table_of(schema)
            shown = filters.projection(columns, schema)
            cond = filters.where(filter, schema, target, self.dialect)
            qhash = filters.query_hash("search", app_id, schema.name, filter, query)
            offset = _search_offset(cursor, qhash)
            terms = search.fts5_terms(query) if self.dialect == "sqlite" else query
            if terms is None:
                return SearchPage()
            stmt = search.statement(
                schema,
                target,
                self.dialect,
                query=terms,
                shown=shown,
                where=cond,
                offset=offset,
                limit=limit + 1,
            )
            n = len(shown)

            def make(r: Any) -> Hit:
                snippet = str(r[n + 1] or "")
                if self.dialect == "sqlite":
                    snippet = search.mark(snippet, query)
                snippet = snippet[: search.SNIPPET_CHARS]
                row = results.fit(_row_out(shown, r), results.RESULT_BYTES - len(snippet) * 4)
                return Hit(row, float(r[n] or 0.0), snippet)

            page = await results.read_page(
                conn, stmt, limit, make, size=lambda h: results.size_of([h.row, h.snippet])
            )
        next_offset = offset + len(page.items)
        cursor_out = None
        if page.more and page.items and next_offset <= MAX_SEARCH_OFFSET:
            cursor_out = filters.encode_cursor(qhash, [next_offset])
        return SearchPage(page.items, cursor_out, page.capped)

    # -- helpers ---------------------------------------------------------------------------

    @asynccontextmanager
    async def _tx(self, app_id: int, *, readonly: bool = False) -> AsyncIterator[AsyncConnection]:
        """A transaction on the app's database; the driver's errors as domain errors."""
        try:
            async with self._db.transaction(
                app_id, timeout_s=self._timeout_s, readonly=readonly
            ) as conn:
                yield conn
        except sa_exc.IntegrityError as error:
            raise Conflict(
                "the database refused the rows: a unique, not-null or check constraint",
                hint="nothing was written; change the values named by the constraint",
                **_constraint(error),
            ) from None
        except sa_exc.OperationalError as error:
            if "locked" in str(error.orig).lower() or "busy" in str(error.orig).lower():
                raise Unavailable("the app's database is busy", hint="retry") from None
            raise InvalidArgument(
                f"the database refused the statement ({_sqlstate(error)})",
                hint="nothing was written",
            ) from None
        except sa_exc.DBAPIError as error:
            raise InvalidArgument(
                f"the database refused the statement ({_sqlstate(error)})",
                hint="nothing was written",
            ) from None

    async def _writable(self, conn: AsyncConnection, table: Any) -> TableSchema:
        """The table's schema, when writing to it runs no code of the app's (:mod:`guard`)."""
        schema = await self._schema(conn, table)
        await guard.refuse_app_triggers(conn, self.dialect, schema.name)
        return schema

    async def _schema(self, conn: AsyncConnection, table: Any) -> TableSchema:
        name = names.check_table(table)
        schema = await catalog.describe(conn, self.dialect, name)
        if schema is None:
            raise NotFound(
                f"no table {name} in this app",
                hint="manage_table list shows the app's tables",
                field="table",
            )
        ident = schema.column(names.ID)
        if ident is None or ident.type != "integer" or not ident.primary_key:
            # a table the app made itself, keyed otherwise: ids could not be returned
            raise FailedPrecondition(
                f"table {name} has no integer primary key id (the app made it otherwise)",
                hint="records works on tables made with manage_table",
                field="table",
            )
        return schema


# -- rows out ------------------------------------------------------------------------------


def _row_out(columns: Sequence[Column], row: Sequence[Any]) -> dict[str, Any]:
    return {c.name: values.from_storage(v, c.type) for c, v in zip(columns, row, strict=False)}


def _only(row: dict[str, Any], wanted: set[str]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k in wanted}


def _limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= limits.LIST_MAX:
        raise InvalidArgument(f"limit: 1 to {limits.LIST_MAX}", field="limit")
    return limit


def _search_offset(cursor: str | None, qhash: str) -> int:
    if cursor is None:
        return 0
    position = filters.decode_cursor(cursor, qhash)
    if (
        len(position) != 1
        or not isinstance(position[0], int)
        or isinstance(position[0], bool)
        or not 0 <= position[0] <= MAX_SEARCH_OFFSET
    ):
        raise InvalidArgument("cursor: not a cursor of this query", field="cursor")
    return int(position[0])


_SQLITE_CONSTRAINT = re.compile(r"(UNIQUE|NOT NULL|CHECK|FOREIGN KEY) constraint failed(?:: (.*))?")


def _constraint(error: sa_exc.IntegrityError) -> dict[str, str]:
    """Which constraint refused the rows, by name only: never the values, never the driver's
    own words (SQLite: the kind and ``table.column``; PostgreSQL: the constraint's name)."""
    found: dict[str, str] = {}
    cause = getattr(error.orig, "__cause__", None)
    name = getattr(cause, "constraint_name", None)
    if isinstance(name, str):
        found["constraint"] = names.shown(name)[1:-1]
    match = _SQLITE_CONSTRAINT.match(str(error.orig).splitlines()[0] if error.orig else "")
    if match is not None:
        found["constraint"] = match.group(1).lower().replace(" ", "_")
        if match.group(2):
            found["columns"] = names.shown(match.group(2))[1:-1]
    return found


def _sqlstate(error: sa_exc.DBAPIError) -> str:
    """The refusal as a short code: PostgreSQL's SQLSTATE, SQLite's exception class."""
    code = getattr(error.orig, "sqlstate", None)
    return f"SQLSTATE {code}" if isinstance(code, str) else type(error.orig).__name__
