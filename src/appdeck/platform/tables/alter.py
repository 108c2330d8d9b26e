"""alter_table's plan: the steps (SQL) that take a table from its schema to the one asked for.

Pure: :func:`plan` gets the current :class:`TableSchema` and the changes and returns every
step with what it costs (``rewrites_table``, ``locks_table``) and whether it loses data
(``destructive``). The service runs the steps in one transaction.

PostgreSQL runs each change as its own ``ALTER TABLE`` (transactional DDL; every ``ALTER
TABLE`` takes an ACCESS EXCLUSIVE lock; a type change rewrites the table, adding a column
with a constant default does not since PostgreSQL 11). SQLite can add, rename and (when
nothing depends on it) drop a column in place; anything else is the documented 12-step
rebuild (https://www.sqlite.org/lang_altertable.html#otheralter): create the new table, check
and copy the rows, drop the old, rename the new, recreate indexes and full text.

A *check* step is a query that finds a row that would not survive the change (a NULL for
``set_not_null``, a value that does not convert for ``change_type``); the service stops there
with an error naming the row and column, and the transaction rolls back.
"""

# ruff: noqa: S608  (the SQL here is built from checked, quoted identifiers; no value is pasted)
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from appdeck.common.errors import InvalidArgument
from appdeck.platform.tables import convert, ddl, limits, names
from appdeck.platform.tables.catalog import Column, Dialect, Index, TableSchema
from appdeck.platform.tables.names import quote

Op = Literal[
    "add_column",
    "drop_column",
    "rename_column",
    "change_type",
    "set_not_null",
    "drop_not_null",
    "set_default",
    "drop_default",
    "add_index",
    "drop_index",
    "add_fulltext",
    "remove_fulltext",
]


@dataclass(frozen=True, slots=True)
class Change:
    """One change asked for; which fields count depends on ``op``."""

    op: Op
    column: str | None = None
    """The column changed (every column op), or the added column's declaration: ``add``."""
    new_name: str | None = None
    type: str | None = None
    default: Any = None
    definition: Column | None = None
    index: ddl.IndexSpec | None = None
    index_name: str | None = None
    columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Step:
    sql: str
    description: str
    rewrites_table: bool = False
    locks_table: bool = True
    destructive: bool = False
    check: str | None = None
    """A check step: the column it checks (a row returned means the change cannot be made)."""


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    target: TableSchema

    @property
    def destructive(self) -> bool:
        return any(step.destructive for step in self.steps)


# -- type conversions ----------------------------------------------------------------------

_UUID_GLOB: Final = "-".join("[0-9a-f]" * n for n in (8, 4, 4, 4, 12))
_TS_GLOB: Final = (
    "[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]."
    + "[0-9]" * 6
    + "Z"
)


@dataclass(frozen=True, slots=True)
class _Conversion:
    sqlite_valid: Callable[[str], str]
    sqlite_value: Callable[[str], str]
    pg_using: Callable[[str], str]
    narrowing: bool = False


def _same(x: str) -> str:
    return x


def _true(x: str) -> str:
    return "1"


_TO_TEXT = _Conversion(_true, lambda x: f"CAST({x} AS TEXT)", lambda x: f"{x}::text")
CONVERSIONS: Final[dict[tuple[str, str], _Conversion]] = {
    ("integer", "text"): _TO_TEXT,
    ("real", "text"): _TO_TEXT,
    ("json", "text"): _TO_TEXT,
    ("uuid", "text"): _TO_TEXT,
    ("boolean", "text"): _Conversion(
        _true,
        lambda x: f"CASE {x} WHEN 1 THEN 'true' WHEN 0 THEN 'false' END",
        lambda x: f"{x}::text",
    ),
    ("timestamp", "text"): _Conversion(
        _true,
        _same,
        lambda x: f"to_char({x} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
    ),
    ("text", "integer"): _Conversion(
        lambda x: f"(typeof({x}) = 'integer' OR CAST(CAST({x} AS INTEGER) AS TEXT) = {x})",
        lambda x: f"CAST({x} AS INTEGER)",
        lambda x: f"{x}::bigint",
    ),
    ("real", "integer"): _Conversion(
        _true, lambda x: f"CAST(round({x}) AS INTEGER)", lambda x: f"round({x})::bigint", True
    ),
    ("boolean", "integer"): _Conversion(_true, _same, lambda x: f"{x}::int::bigint"),
    ("text", "real"): _Conversion(
        lambda x: (
            f"(typeof({x}) IN ('integer', 'real') OR ({x} <> '' AND {x} NOT GLOB "
            f"'*[^0-9.eE+-]*' AND typeof(CAST({x} AS NUMERIC)) IN ('integer', 'real')))"
        ),
        lambda x: f"CAST({x} AS REAL)",
        lambda x: f"{x}::double precision",
    ),
    ("integer", "real"): _Conversion(
        _true, lambda x: f"CAST({x} AS REAL)", lambda x: f"{x}::double precision"
    ),
    ("text", "boolean"): _Conversion(
        lambda x: f"lower({x}) IN ('true', 'false', '1', '0')",
        lambda x: f"CASE WHEN lower({x}) IN ('true', '1') THEN 1 ELSE 0 END",
        lambda x: f"{x}::boolean",
    ),
    ("integer", "boolean"): _Conversion(
        lambda x: f"{x} IN (0, 1)",
        _same,
        lambda x: (
            f"(CASE {x} WHEN 0 THEN 'false' WHEN 1 THEN 'true' ELSE 'not 0 or 1' END)::boolean"
        ),
    ),
    ("text", "json"): _Conversion(
        lambda x: f"json_valid({x})", lambda x: f"json({x})", lambda x: f"{x}::jsonb"
    ),
    ("text", "uuid"): _Conversion(
        lambda x: f"lower({x}) GLOB '{_UUID_GLOB}'", lambda x: f"lower({x})", lambda x: f"{x}::uuid"
    ),
    ("text", "timestamp"): _Conversion(
        lambda x: f"{x} GLOB '{_TS_GLOB}'", _same, lambda x: f"{x}::timestamptz"
    ),
}


# -- the working model ---------------------------------------------------------------------


@dataclass(slots=True)
class _Col:
    origin: str | None
    """Its name in the current table (None: added by this alter)."""
    column: Column
    from_type: str | None = None
    """Set when its type changes: the type it had."""
    checked_nulls: bool = False


@dataclass(slots=True)
class _Work:
    dialect: Dialect
    table: str
    cols: list[_Col]
    indexes: list[Index]
    fulltext: tuple[str, ...]
    steps: list[Step] = field(default_factory=list)
    checks: list[Step] = field(default_factory=list)
    rebuild: bool = False
    fts_touched: bool = False

    def find(self, name: Any, *, where: str) -> _Col:
        checked = names.check_column(name, field=where)
        for col in self.cols:
            if col.column.name == checked:
                return col
        raise InvalidArgument(f"{where}: the table has no column {checked}", field=where)

    def alter(
        self, sql: str, what: str, *, rewrites_table: bool = False, destructive: bool = False
    ) -> None:
        statement = f"ALTER TABLE {quote(self.table)} {sql}"
        self.steps.append(Step(statement, what, rewrites_table, True, destructive))


def plan(dialect: Dialect, current: TableSchema, changes: Sequence[Change]) -> Plan:
    """The steps that make ``current`` into what ``changes`` ask for (in order)."""
    if not changes:
        raise InvalidArgument("changes: ask for at least one change", field="changes")
    limits.at_most(len(changes), limits.ALTER_STEPS, "changes", field="changes")
    unknown = [c.name for c in current.columns if not c.known and c.name != names.ID]
    work = _Work(
        dialect,
        current.name,
        [_Col(c.name, c) for c in current.columns if c.name != names.ID],
        list(current.indexes),
        current.fulltext,
    )
    for i, change in enumerate(changes):
        _apply(work, change, f"changes/{i}")
    for col in work.cols:
        if col.column.name in unknown and col.from_type is None and work.rebuild:
            raise InvalidArgument(
                f"column {col.column.name} has a type AppDeck does not manage; change its type "
                "first or drop it",
                field="changes",
            )
    target = TableSchema(
        current.name,
        (*(c for c in current.columns if c.name == names.ID), *(c.column for c in work.cols)),
        tuple(work.indexes),
        work.fulltext,
        current.row_estimate,
    )
    limits.at_most(len(target.columns), limits.COLUMNS_PER_TABLE, "columns", field="changes")
    limits.at_most(len(target.indexes), limits.INDEXES_PER_TABLE, "indexes", field="changes")
    if dialect == "sqlite" and work.rebuild:
        steps = _rebuild(work, current, target)
    else:
        steps = [*work.checks, *work.steps]
        if work.fts_touched or current.fulltext != target.fulltext:
            steps = _with_fulltext(dialect, current, target, steps)
    return Plan(tuple(steps), target)


def _with_fulltext(
    dialect: Dialect, current: TableSchema, target: TableSchema, steps: list[Step]
) -> list[Step]:
    before = [
        Step(sql, "remove the full-text index", rewrites_table=dialect == "postgresql")
        for sql in (ddl.fulltext_drop(dialect, current.name) if current.fulltext else [])
    ]
    after = (
        [
            Step(sql, f"full text on {', '.join(target.fulltext)}", rewrites_table=True)
            for sql in (ddl.fulltext_create(dialect, target.name, target.fulltext))
        ]
        if target.fulltext
        else []
    )
    return [*before, *steps, *after]


# -- one change at a time ------------------------------------------------------------------


def _apply(work: _Work, change: Change, where: str) -> None:
    if change.op in ("add_index", "drop_index", "add_fulltext", "remove_fulltext"):
        _apply_table_op(work, change, where)
    elif change.op == "add_column":
        _add_column(work, change, where)
    else:
        col = work.find(change.column, where=f"{where}/column")
        _COLUMN_OPS[change.op](work, col, change, where)


def _add_column(work: _Work, change: Change, where: str) -> None:
    if change.definition is None:
        raise InvalidArgument(f"{where}/definition: add_column needs it", field=where)
    (column,) = ddl.check_columns([change.definition], field=f"{where}/definition")
    where = f"{where}/definition"
    if any(c.column.name == column.name for c in work.cols):
        raise InvalidArgument(f"{where}/name: column {column.name} exists", field=f"{where}/name")
    if not column.nullable and column.default is None:
        raise InvalidArgument(
            f"{where}/nullable: a new not-null column needs a default (the rows there are get it)",
            field=f"{where}/nullable",
        )
    work.cols.append(_Col(None, column))
    work.rebuild |= work.dialect == "sqlite" and column.unique
    work.alter(f"ADD COLUMN {ddl.column_sql(work.dialect, column)}", f"add column {column.name}")


def _drop_column(work: _Work, col: _Col, change: Change, where: str) -> None:
    name = col.column.name
    work.cols.remove(col)
    indexed = [i for i in work.indexes if name in i.columns]
    work.indexes = [i for i in work.indexes if i not in indexed]
    if name in work.fulltext:
        work.fulltext = tuple(c for c in work.fulltext if c != name)
        work.fts_touched = True
    work.rebuild |= work.dialect == "sqlite" and (bool(indexed) or col.column.unique)
    work.alter(
        f"DROP COLUMN {quote(name)}",
        f"drop column {name} and its values" + (" (and its indexes)" if indexed else ""),
        destructive=True,
        rewrites_table=work.dialect == "sqlite",
    )


def _rename_column(work: _Work, col: _Col, change: Change, where: str) -> None:
    old = col.column.name
    new = names.check_column(change.new_name, field=f"{where}/new_name")
    if any(c.column.name == new for c in work.cols):
        raise InvalidArgument(f"{where}/new_name: column {new} exists", field=f"{where}/new_name")
    col.column = replace(col.column, name=new)
    work.indexes = [
        replace(i, columns=tuple(new if c == old else c for c in i.columns)) for i in work.indexes
    ]
    if old in work.fulltext:
        work.fulltext = tuple(new if c == old else c for c in work.fulltext)
        work.fts_touched = True
    work.alter(f"RENAME COLUMN {quote(old)} TO {quote(new)}", f"rename column {old} to {new}")


def _change_type(work: _Work, col: _Col, change: Change, where: str) -> None:
    name, old = col.column.name, col.column.type
    new = str(change.type)
    conversion = CONVERSIONS.get((old, new))
    if conversion is None:
        raise InvalidArgument(
            f"{where}/type: column {name} cannot change from {old} to {new}",
            hint="supported: anything to text; text to any type; integer to real or boolean; "
            "real or boolean to integer",
            field=f"{where}/type",
        )
    if name in work.fulltext:
        raise InvalidArgument(
            f"{where}/type: {name} is full-text; remove_fulltext first", field=f"{where}/type"
        )
    default = col.column.default
    if default is not None:
        default = convert.default(old, new, default, field=f"{where}/type")
    col.from_type = col.from_type or old
    col.column = replace(col.column, type=new, default=default)
    work.rebuild |= work.dialect == "sqlite"
    x = quote(name)
    what = f"change {name} from {old} to {new}" + (
        " (may lose data)" if conversion.narrowing else ""
    )
    refused = convert.pg_first_refused(work.table, name, old, new)
    if work.dialect == "postgresql" and refused is not None:
        what_check = f"check that every value of {name} converts to {new}"
        work.steps.append(Step(refused, what_check, locks_table=False, check=name))
    if default is not None:
        work.alter(f"ALTER COLUMN {x} DROP DEFAULT", f"drop the default of {name} for a moment")
    work.alter(
        f"ALTER COLUMN {x} TYPE {ddl.sql_type(work.dialect, new)} USING {conversion.pg_using(x)}",
        what,
        rewrites_table=True,
        destructive=conversion.narrowing,
    )
    if default is not None:
        work.alter(
            f"ALTER COLUMN {x} SET DEFAULT {ddl.literal(work.dialect, new, default)}",
            f"set the default of {name} back",
        )


def _nullability(work: _Work, col: _Col, change: Change, where: str) -> None:
    x = quote(col.column.name)
    work.rebuild |= work.dialect == "sqlite"
    if change.op == "drop_not_null":
        col.column = replace(col.column, nullable=True)
        work.alter(f"ALTER COLUMN {x} DROP NOT NULL", f"allow NULL in {col.column.name}")
        return
    col.column = replace(col.column, nullable=False)
    work.steps.append(
        Step(
            f"SELECT {quote(names.ID)} FROM {quote(work.table)} WHERE {x} IS NULL LIMIT 1",
            f"check that no row has NULL in {col.column.name}",
            locks_table=False,
            check=col.column.name,
        )
    )
    work.alter(f"ALTER COLUMN {x} SET NOT NULL", f"refuse NULL in {col.column.name}")


def _default(work: _Work, col: _Col, change: Change, where: str) -> None:
    x = quote(col.column.name)
    work.rebuild |= work.dialect == "sqlite"
    if change.op == "drop_default":
        col.column = replace(col.column, default=None)
        work.alter(f"ALTER COLUMN {x} DROP DEFAULT", f"drop the default of {col.column.name}")
        return
    value = ddl.check_default(col.column.type, change.default, field=f"{where}/default")
    if value is None:
        raise InvalidArgument(
            f"{where}/default: give a value (drop_default removes one)", field=f"{where}/default"
        )
    col.column = replace(col.column, default=value)
    literal = ddl.literal(work.dialect, col.column.type, value)
    work.alter(f"ALTER COLUMN {x} SET DEFAULT {literal}", f"set the default of {col.column.name}")


_COLUMN_OPS: Final[dict[str, Callable[[_Work, _Col, Change, str], None]]] = {
    "drop_column": _drop_column,
    "rename_column": _rename_column,
    "change_type": _change_type,
    "set_not_null": _nullability,
    "drop_not_null": _nullability,
    "set_default": _default,
    "drop_default": _default,
}


def _apply_table_op(work: _Work, change: Change, where: str) -> None:
    every = [names.ID, *(c.column.name for c in work.cols)]
    if change.op == "add_index":
        if change.index is None:
            raise InvalidArgument(f"{where}/index: add_index needs it", field=f"{where}/index")
        (index,) = ddl.check_indexes(
            work.table, [change.index], every, field=f"{where}/index", one=True
        )
        if any(i.name == index.name for i in work.indexes):
            raise InvalidArgument(
                f"{where}/index/name: index {index.name} exists", field=f"{where}/index/name"
            )
        work.indexes.append(index)
        work.steps.append(Step(ddl.create_index(work.table, index), f"add index {index.name}"))
    elif change.op == "drop_index":
        name = names.check_index(change.index_name, field=f"{where}/index_name")
        if not any(i.name == name for i in work.indexes):
            raise InvalidArgument(
                f"{where}/index_name: the table has no index {name}", field=f"{where}/index_name"
            )
        work.indexes = [i for i in work.indexes if i.name != name]
        work.steps.append(Step(ddl.drop_index(name), f"drop index {name}"))
    else:
        text_cols = [c.column for c in work.cols]
        asked = ddl.check_fulltext(change.columns, text_cols, field=f"{where}/columns")
        if not asked:
            raise InvalidArgument(f"{where}/columns: name at least one", field=f"{where}/columns")
        if change.op == "add_fulltext":
            work.fulltext = tuple(dict.fromkeys((*work.fulltext, *asked)))
        else:
            missing = [c for c in asked if c not in work.fulltext]
            if missing:
                raise InvalidArgument(
                    f"{where}/columns: {missing[0]} is not full-text", field=f"{where}/columns"
                )
            work.fulltext = tuple(c for c in work.fulltext if c not in asked)
        limits.at_most(
            len(work.fulltext),
            limits.FULLTEXT_COLUMNS,
            "full-text columns",
            field=f"{where}/columns",
        )
        work.fts_touched = True


# -- SQLite's rebuild ----------------------------------------------------------------------


def _rebuild(work: _Work, current: TableSchema, target: TableSchema) -> list[Step]:
    if any(not c.column.known for c in work.cols):
        raise InvalidArgument(
            "this change rebuilds the table, and a column has a type AppDeck does not manage: "
            "drop that column first",
            field="changes",
        )
    table, new = quote(work.table), quote(names.rebuild_table(work.table))
    was = {c.name: c for c in current.columns}
    destructive = any(s.destructive for s in work.steps)
    steps = [
        Step(sql, "remove the full-text index for the rebuild")
        for sql in (ddl.fulltext_drop("sqlite", work.table) if current.fulltext else [])
    ]
    steps.append(
        Step(
            ddl.create_table(
                "sqlite", names.rebuild_table(work.table), [c.column for c in work.cols]
            ),
            "create the table as it will be",
        )
    )
    into, select = [quote(names.ID)], [quote(names.ID)]
    for col in work.cols:
        steps.extend(_rebuild_checks(work.table, col, was))
        if col.origin is None:
            continue
        x = quote(col.origin)
        into.append(quote(col.column.name))
        conversion = CONVERSIONS.get((col.from_type, col.column.type)) if col.from_type else None
        select.append(conversion.sqlite_value(x) if conversion else x)
    steps.append(
        Step(
            f"INSERT INTO {new} ({', '.join(into)}) SELECT {', '.join(select)} FROM {table}",
            "copy every row" + (" (dropping what this change drops)" if destructive else ""),
            rewrites_table=True,
            destructive=destructive,
        )
    )
    old_name, new_name = (
        ddl.literal("sqlite", "text", n) for n in (work.table, names.rebuild_table(work.table))
    )
    steps += [
        Step(
            f"DELETE FROM sqlite_sequence WHERE name = {new_name}",
            "forget the counter the copy set (the highest id copied)",
        ),
        Step(
            f"INSERT INTO sqlite_sequence (name, seq) SELECT {new_name}, seq FROM sqlite_sequence "
            f"WHERE name = {old_name}",
            "keep the next id where it was (an id once given is never given again)",
        ),
        Step(
            f"DROP TABLE {table}", "drop the old table (its rows were copied)", rewrites_table=True
        ),
        Step(f"ALTER TABLE {new} RENAME TO {table}", "put the new table in its place"),
        *(
            Step(ddl.create_index(work.table, i), f"recreate index {i.name}")
            for i in target.indexes
        ),
    ]
    if target.fulltext:
        steps += [
            Step(sql, f"full text on {', '.join(target.fulltext)}", rewrites_table=True)
            for sql in ddl.fulltext_create("sqlite", work.table, target.fulltext)
        ]
    return steps


def _rebuild_checks(table: str, col: _Col, was: dict[str, Column]) -> list[Step]:
    """The checks that rows of the old table survive the copy into ``col``."""
    name = col.column.name
    found = f"SELECT {quote(names.ID)} FROM {quote(table)} WHERE "
    if col.origin is None:
        if col.column.nullable or col.column.default is not None:
            return []
        return [
            Step(f"{found}1 LIMIT 1", f"check that no row needs {name}", False, False, check=name)
        ]
    x = quote(col.origin)
    checks = []
    if col.from_type is not None:
        conversion = CONVERSIONS.get((col.from_type, col.column.type))
        if conversion is None:
            raise InvalidArgument(
                f"column {name} cannot change from {col.from_type} to {col.column.type}",
                field="changes",
            )
        checks.append(
            Step(
                f"{found}{x} IS NOT NULL AND NOT ({conversion.sqlite_valid(x)}) LIMIT 1",
                f"check that every value of {name} converts to {col.column.type}",
                locks_table=False,
                check=name,
            )
        )
    if not col.column.nullable and was[col.origin].nullable:
        checks.append(
            Step(
                f"{found}{x} IS NULL LIMIT 1",
                f"check that no row has NULL in {name}",
                locks_table=False,
                check=name,
            )
        )
    return checks
