"""TableService: the tables of an app's own database (create, list, describe, rename, drop,
alter), each in one transaction on that database.

Every call: the caller's role on the app first (``table.read``, ``table.write``, and
``table.drop`` for dropping a table or a column), then the schema read back from the database
in the same transaction (the app may change it at any time), then the SQL built by :mod:`ddl`
and :mod:`alter` from checked names and values. A failure anywhere rolls the whole call back:
the table is exactly as it was. After a schema write the service emits a ``table.updated``
change (``tables.updated`` when the list changed too) for the resources' subscribers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from appdeck.common.errors import (
    AppDeckError,
    ConfirmationRequired,
    Conflict,
    InvalidArgument,
    NotFound,
)
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService, AppView
from appdeck.platform.changes import Change, ChangeFeed, Kind
from appdeck.platform.tables import alter as plans
from appdeck.platform.tables import catalog, ddl, guard, limits, names
from appdeck.platform.tables.catalog import Column, Databases, Dialect, TableSchema
from appdeck.platform.tables.databases import forget_prepared_statements

log = logging.getLogger("appdeck.tables")


@dataclass(frozen=True, slots=True)
class TableSummary:
    name: str
    row_estimate: int


@dataclass(frozen=True, slots=True)
class AlterResult:
    table: str
    plan: plans.Plan
    applied: bool
    schema: TableSchema
    """After the change (applied), or as it would be (a dry run)."""


class TableService:
    def __init__(self, apps: AppService, databases: Databases, feed: ChangeFeed) -> None:
        self._apps = apps
        self._dbs = databases
        self._feed = feed

    @property
    def dialect(self) -> Dialect:
        return self._dbs.dialect

    # -- reads ------------------------------------------------------------------------------

    async def list(
        self, principal: Principal, app_id: int, *, offset: int = 0, limit: int = 50
    ) -> list[TableSummary]:
        await self._apps.load(principal, app_id, "table.read")
        limit = max(1, min(limit, limits.LIST_MAX + 1))  # the paginator asks for one more
        async with self._transaction(app_id, readonly=True) as conn:
            found = await catalog.list_tables(conn, self.dialect)
            page = found[max(0, offset) : max(0, offset) + limit]
            return [
                TableSummary(n, await catalog.row_estimate(conn, self.dialect, n)) for n in page
            ]

    async def describe(self, principal: Principal, app_id: int, table: str) -> TableSchema:
        await self._apps.load(principal, app_id, "table.read")
        name = names.check_table(table)
        async with self._transaction(app_id, readonly=True) as conn:
            return await self._schema(conn, name, estimate=True)

    # -- writes -----------------------------------------------------------------------------

    async def create(
        self,
        principal: Principal,
        app_id: int,
        table: str,
        columns: Sequence[Column],
        *,
        indexes: Sequence[ddl.IndexSpec] = (),
        fulltext: Sequence[str] = (),
    ) -> TableSchema:
        view = await self._apps.load(principal, app_id, "table.write")
        name = names.check_table(table)
        checked = ddl.check_columns(columns)
        every = [names.ID, *(c.name for c in checked)]
        limits.at_most(len(indexes), limits.INDEXES_PER_TABLE, "indexes", field="indexes")
        declared = ddl.check_indexes(name, indexes, every)
        if len({i.name for i in declared}) != len(declared):
            raise InvalidArgument("indexes: two indexes have the same name", field="indexes")
        text = ddl.check_fulltext(fulltext, checked)
        statements = [ddl.create_table(self.dialect, name, checked)]
        statements += [ddl.create_index(name, index) for index in declared]
        if text:
            statements += ddl.fulltext_create(self.dialect, name, text)
        async with self._transaction(app_id) as conn:
            existing = await catalog.list_tables(conn, self.dialect)
            if name in existing:
                raise Conflict(f"table {name} exists", hint="describe it, or pick another name")
            limits.at_most(len(existing) + 1, limits.TABLES_PER_APP, "tables", field="table")
            await self._run(conn, statements, field="table")
            schema = await self._schema(conn, name)
        await self._changed(view, name, "tables.updated")
        return schema

    async def rename(
        self, principal: Principal, app_id: int, table: str, new_name: str
    ) -> TableSchema:
        view = await self._apps.load(principal, app_id, "table.write")
        name = names.check_table(table)
        new = names.check_table(new_name, field="new_name")
        async with self._transaction(app_id) as conn:
            schema = await self._schema(conn, name)
            if new != name and await catalog.describe(conn, self.dialect, new) is not None:
                raise Conflict(f"table {new} exists", hint="pick another name")
            rename = f"ALTER TABLE {names.quote(name)} RENAME TO {names.quote(new)}"
            statements = [rename]
            if schema.fulltext and self.dialect == "sqlite":  # the FTS table names its table
                statements = [
                    *ddl.fulltext_drop(self.dialect, name),
                    rename,
                    *ddl.fulltext_create(self.dialect, new, schema.fulltext),
                ]
            elif schema.fulltext:
                gin, new_gin = names.fts_gin(name), names.fts_gin(new)
                statements.append(
                    f"ALTER INDEX {names.quote(gin)} RENAME TO {names.quote(new_gin)}"
                )
            await self._run(conn, statements, field="new_name")
            renamed = await self._schema(conn, new)
        await self._changed(view, name, "tables.updated")
        await self._changed(view, new, "table.updated")
        return renamed

    async def drop(
        self, principal: Principal, app_id: int, table: str, *, confirmed: bool = False
    ) -> str:
        view = await self._apps.load(principal, app_id, "table.drop")
        name = names.check_table(table)
        async with self._transaction(app_id) as conn:
            schema = await self._schema(conn, name, estimate=True)
            if not confirmed:
                raise ConfirmationRequired(
                    f"dropping table {name} deletes its {schema.row_estimate} row(s)",
                    question=f"Drop table {name} of app {view.app.name} and its "
                    f"{schema.row_estimate} row(s)? This cannot be undone.",
                    what=f"dropping table {name}",
                )
            await guard.refuse_app_triggers(conn, self.dialect, name, itself=False)
            statements = ddl.fulltext_drop(self.dialect, name) if schema.fulltext else []
            statements.append(f"DROP TABLE {names.quote(name)}")
            await self._run(conn, statements, field="table")
        await self._changed(view, name, "tables.updated")
        return name

    async def alter(
        self,
        principal: Principal,
        app_id: int,
        table: str,
        changes: Sequence[plans.Change],
        *,
        dry_run: bool = False,
        confirmed: bool = False,
    ) -> AlterResult:
        """Plan ``changes`` and (unless ``dry_run``) apply them in one transaction. Dropping
        a column needs ``table.drop``; a destructive step needs ``confirmed``."""
        view = await self._apps.load(principal, app_id, "table.write")
        name = names.check_table(table)
        if any(c.op == "drop_column" for c in changes) and not dry_run:
            await self._apps.load(principal, app_id, "table.drop")
        # SQLite rebuilds a table (DROP TABLE of the old one): with foreign keys enforced,
        # that deleted the rows of every table referencing it ON DELETE CASCADE
        async with self._dbs.transaction(
            app_id, timeout_s=limits.QUERY_TIMEOUT_S, readonly=dry_run, cascades=dry_run
        ) as conn:
            current = await self._schema(conn, name, estimate=True)
            if not dry_run and self.dialect == "postgresql":
                # no change by the app between the schema read and the plan's last step
                await conn.exec_driver_sql(
                    f"LOCK TABLE {names.quote(name)} IN ACCESS EXCLUSIVE MODE"
                )
                current = await self._schema(conn, name, estimate=True)
            plan = plans.plan(self.dialect, current, changes)
            if dry_run:
                return AlterResult(name, plan, False, plan.target)
            if plan.destructive and not confirmed:
                lost = "; ".join(s.description for s in plan.steps if s.destructive)
                raise ConfirmationRequired(
                    f"this change to table {name} loses data: {lost}",
                    question=f"Change table {name} of app {view.app.name} "
                    f"({current.row_estimate} row(s))? It will {lost}. This cannot be undone.",
                    what=f"the change to table {name}",
                )
            if any(step.rewrites_table for step in plan.steps):  # SQLite: DROP TABLE the old
                await guard.refuse_app_triggers(conn, self.dialect, name, itself=False)
            await self._apply(conn, name, plan)
            after = await self._schema(conn, name, estimate=True)
        await self._changed(view, name, "table.updated")
        return AlterResult(name, plan, True, after)

    # -- inside ---------------------------------------------------------------------------

    def _transaction(
        self, app_id: int, *, readonly: bool = False
    ) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._dbs.transaction(app_id, timeout_s=limits.QUERY_TIMEOUT_S, readonly=readonly)

    async def _schema(
        self, conn: AsyncConnection, name: str, *, estimate: bool = False
    ) -> TableSchema:
        schema = await catalog.describe(conn, self.dialect, name)
        if schema is None:
            raise NotFound(
                f"no table {name}", hint="manage_table list shows the app's tables", field="table"
            )
        if estimate:
            rows = await catalog.row_estimate(conn, self.dialect, name)
            schema = TableSchema(schema.name, schema.columns, schema.indexes, schema.fulltext, rows)
        return schema

    async def _apply(self, conn: AsyncConnection, table: str, plan: plans.Plan) -> None:
        if self.dialect == "postgresql":
            await conn.exec_driver_sql("SET LOCAL standard_conforming_strings = on")
        for step in plan.steps:
            if step.check is None:
                await self._run(conn, [step.sql], field="changes", what=step.description)
                continue
            row = (await conn.execute(sa.text(step.sql))).first()
            if row is not None:
                raise InvalidArgument(
                    f"row id {row[0]} of {table}: column {step.check} cannot take the change "
                    f"({step.description} failed); nothing was changed",
                    field="changes",
                    row=row[0],
                    column=step.check,
                )

    async def _run(
        self,
        conn: AsyncConnection,
        statements: Sequence[str],
        *,
        field: str,
        what: str = "the change",
    ) -> None:
        if self.dialect == "postgresql":
            await conn.exec_driver_sql("SET LOCAL standard_conforming_strings = on")
        for statement in statements:
            try:
                await conn.exec_driver_sql(statement)
            except sa_exc.DBAPIError as exc:
                if _timed_out(exc):
                    raise  # AppDatabases.transaction makes it QueryTimeout
                raise _refused(exc, field, what) from None
            finally:
                forget_prepared_statements(conn)

    async def _changed(self, view: AppView, table: str, kind: Kind) -> None:
        app = view.app
        await self._feed.emit(Change(kind, app.tenant_id, app.id, table=table))


def _timed_out(exc: sa_exc.DBAPIError) -> bool:
    text = str(exc.orig).lower()
    return "interrupted" in text or "statement timeout" in text or "canceling statement" in text


_WHY: Final = {
    "22P02": "a value does not convert to the new type",
    "22003": "a value is out of range for the new type",
    "22007": "a value is not a valid timestamp",
    "22008": "a value is not a valid timestamp",
    "23502": "a row has NULL where NULL is refused",
    "23505": "two rows have the same value where values must be unique",
    "23514": "a row fails a check",
    "42P07": "the name is in use",
    "42710": "the name is in use",
}


def _refused(exc: sa_exc.DBAPIError, field: str, what: str) -> AppDeckError:
    """The database refused a step: said with the step (ours), the SQLSTATE (PostgreSQL) or
    the kind (SQLite) and what that means, never the driver's own words (they quote values)."""
    code = getattr(exc.orig, "sqlstate", None)
    text = str(exc.orig).lower()
    log.info("schema change refused by the database at %r: %s", what, code or type(exc.orig))
    if isinstance(code, str):
        kind, why = f"SQLSTATE {code}", _WHY.get(code, "")
    else:
        kind = type(exc.orig).__name__
        why = next(
            (w for key, w in _SQLITE_WHY if key in text),
            "",
        )
    message = f"{what}: the database refused it ({kind}{': ' + why if why else ''})"
    if isinstance(exc, sa_exc.IntegrityError) or why in (_WHY["23505"], _WHY["42P07"]):
        return Conflict(message, hint="nothing was changed", field=field)
    return InvalidArgument(message, hint="nothing was changed", field=field)


_SQLITE_WHY: Final = (
    ("unique constraint", _WHY["23505"]),
    ("not null constraint", _WHY["23502"]),
    ("check constraint", _WHY["23514"]),
    ("already exists", _WHY["42P07"]),
)
