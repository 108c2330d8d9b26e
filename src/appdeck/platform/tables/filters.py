"""The filter DSL, sorting, keyset cursors and projections of ``records``, as SQLAlchemy Core
expressions over one table's :class:`TableSchema`. Nothing here runs SQL.

A filter is a JSON object, one of::

    {"and": [filter, ...]}            every one (1 to 100 items)
    {"or":  [filter, ...]}            any one
    {"not": filter}                   the opposite
    {"column": "age", "op": "gte", "value": 18}

    op        value                 column types
    eq, ne    a value of the type   all but json (ne also matches NULL: IS DISTINCT FROM)
    lt, lte, gt, gte                text, integer, real, timestamp
    in        a list, 1..1000       all but json
    like      a pattern: % any, _ one character, \\ escapes (\\%, \\_, \\\\); case-insensitive
    is_null   true / false          all

Limits: nesting depth 8, 200 conditions, 1000 values in one ``in``. Every column name is
checked against the schema (an unknown one is an error naming it); every value is checked by
:mod:`values` against the column's type and bound as a parameter.

Sorting: up to 5 ``{"column": c, "direction": "asc"|"desc"}``; ``id`` always ends the order,
so that it is total. NULL sorts first ascending and last descending, on both dialects.

A list cursor is opaque: base64 of the last row's sort values and a hash of the query
(table, filter, sort). It is refused for any other query; the values in it are checked by
type again and bound, so a forged one can do no more than a filter could.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.elements import BindParameter, quoted_name
from sqlalchemy.types import NullType

from appdeck.common.errors import InvalidArgument
from appdeck.platform.tables import names, values
from appdeck.platform.tables.catalog import Column, TableSchema
from appdeck.platform.tables.limits import PAYLOAD_BYTES, VALUE_BYTES

Dialect = Literal["sqlite", "postgresql"]

MAX_DEPTH: Final = 8
MAX_CONDITIONS: Final = 200
MAX_IN: Final = 1000
MAX_SORT_KEYS: Final = 5
MAX_PATTERN: Final = 1000
MAX_CURSOR: Final = PAYLOAD_BYTES

OPS: Final = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "like", "is_null")
_ORDERED: Final = frozenset({"text", "integer", "real", "timestamp"})
_EQUATABLE: Final = frozenset({"text", "integer", "real", "boolean", "timestamp", "uuid"})
_SORTABLE: Final = _EQUATABLE


def table_of(schema: TableSchema) -> sa.TableClause:
    """The table as a Core clause: every name quoted, every column untyped (values are bound
    in the form :mod:`values` made them, with no further processing)."""
    cols: list[sa.ColumnClause[Any]] = [
        sa.column(quoted_name(c.name, quote=True)) for c in schema.columns
    ]
    return sa.table(quoted_name(schema.name, quote=True), *cols)


OVERSIZED: Final = f"[not shown: a value larger than {VALUE_BYTES} bytes]"
"""What a value the app wrote itself past the value limit reads as (ours never are)."""


def readable(table: sa.TableClause, column: Column, dialect: Dialect) -> ColumnElement[Any]:
    """The column as rows are read: a value the app itself wrote larger than
    :data:`VALUE_BYTES` (the app is hostile; SQLite takes up to 1 GB in any column) reads as
    :data:`OVERSIZED` instead of being loaded into the platform's memory."""
    col: ColumnElement[Any] = table.c[column.name]
    if dialect == "postgresql":
        if column.type not in ("text", "json", "unknown"):
            return col
        col = sa.cast(col, sa.Text) if column.type != "text" else col
        size = sa.func.octet_length(col)
    else:
        size = sa.func.length(col)
    return sa.case((size > VALUE_BYTES, bound(OVERSIZED)), else_=col).label(column.name)


def column_of(schema: TableSchema, name: Any, *, field: str) -> Column:
    """The column ``name`` of the table, or an error naming ``field``."""
    if not isinstance(name, str):
        raise InvalidArgument(f"{field}: a column name must be a string", field=field)
    column = schema.column(name) if names.is_valid(name) or name == names.ID else None
    if column is None:
        raise InvalidArgument(
            f"{field}: table {schema.name} has no column {names.shown(name)}",
            hint=f"its columns: {', '.join(schema.column_names)}",
            field=field,
        )
    return column


def bound(value: Any) -> BindParameter[Any]:
    """``value`` (already in its stored form) as a bound parameter with no type processing."""
    return sa.literal(value, NullType())


# -- filters -------------------------------------------------------------------------------


@dataclass
class _Budget:
    left: int = MAX_CONDITIONS


def where(
    spec: Any,
    schema: TableSchema,
    table: sa.TableClause,
    dialect: Dialect,
    *,
    field: str = "filter",
) -> ColumnElement[bool] | None:
    """The filter ``spec`` (None: no filter) as a boolean expression."""
    if spec is None:
        return None
    return _node(spec, schema, table, dialect, field, 1, _Budget())


def _node(
    spec: Any,
    schema: TableSchema,
    table: sa.TableClause,
    dialect: Dialect,
    field: str,
    depth: int,
    budget: _Budget,
) -> ColumnElement[bool]:
    if depth > MAX_DEPTH:
        raise InvalidArgument(f"{field}: nested deeper than {MAX_DEPTH} levels", field=field)
    if not isinstance(spec, dict):
        raise InvalidArgument(f"{field}: a filter is an object", field=field)
    budget.left -= 1
    if budget.left < 0:
        raise InvalidArgument(f"filter: more than {MAX_CONDITIONS} conditions", field="filter")
    keys = set(spec)
    if keys in ({"and"}, {"or"}):
        (key,) = keys
        items = spec[key]
        if not isinstance(items, list) or not items:
            raise InvalidArgument(f"{field}.{key}: a non-empty list of filters", field=field)
        parts = [
            _node(item, schema, table, dialect, f"{field}.{key}[{i}]", depth + 1, budget)
            for i, item in enumerate(items)
        ]
        return sa.and_(*parts) if key == "and" else sa.or_(*parts)
    if keys == {"not"}:
        return sa.not_(
            _node(spec["not"], schema, table, dialect, f"{field}.not", depth + 1, budget)
        )
    if "column" in keys and "op" in keys and keys <= {"column", "op", "value"}:
        return _condition(spec, schema, table, dialect, field)
    raise InvalidArgument(
        f"{field}: expected {{and: [...]}}, {{or: [...]}}, {{not: ...}} or {{column, op, value}}",
        field=field,
    )


def _condition(
    spec: dict[str, Any], schema: TableSchema, table: sa.TableClause, dialect: Dialect, field: str
) -> ColumnElement[bool]:
    column = column_of(schema, spec["column"], field=f"{field}.column")
    op, value, at = spec["op"], spec.get("value"), f"{field}.value"
    col: ColumnElement[Any] = table.c[column.name]
    if op not in OPS:
        raise InvalidArgument(
            f"{field}.op: not an operator", hint=f"one of {', '.join(OPS)}", field=f"{field}.op"
        )
    if op == "is_null":
        if not isinstance(value, bool):
            raise InvalidArgument(f"{at}: is_null takes true or false", field=at)
        return col.is_(None) if value else col.is_not(None)
    allowed = _ORDERED if op in ("lt", "lte", "gt", "gte") else _EQUATABLE
    if op == "like":
        allowed = frozenset({"text"})
    if column.type not in allowed:
        raise InvalidArgument(
            f"{field}: {op} does not apply to {column.name} (type {column.type})", field=field
        )
    if op == "in":
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_IN:
            raise InvalidArgument(f"{at}: in takes a list of 1 to {MAX_IN} values", field=at)
        many = [_bound(v, column, dialect, f"{at}[{i}]") for i, v in enumerate(value)]
        return col.in_(many)
    if op == "like":
        pattern = _pattern(value, at)
        return (
            col.ilike(pattern, escape="\\")
            if dialect == "postgresql"
            else col.like(pattern, escape="\\")
        )
    one = _bound(value, column, dialect, at)
    match op:
        case "eq":
            return col == one
        case "ne":
            return col.is_distinct_from(one)
        case "lt":
            return col < one
        case "lte":
            return col <= one
        case "gt":
            return col > one
        case _:
            return col >= one


def _bound(value: Any, column: Column, dialect: Dialect, field: str) -> BindParameter[Any]:
    if value is None:
        raise InvalidArgument(f"{field}: null never compares; use op is_null", field=field)
    return bound(values.to_storage(value, column.type, dialect, field=field))


def _pattern(value: Any, field: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_PATTERN:
        raise InvalidArgument(
            f"{field}: a like pattern is a string of at most {MAX_PATTERN} characters",
            field=field,
        )
    values.check(value, "text", field=field)  # no NUL, no lone surrogate
    escaped = False
    for ch in value:
        if escaped:
            if ch not in "%_\\":
                raise InvalidArgument(
                    f"{field}: \\ escapes only %, _ and \\",
                    hint="write \\\\ for a backslash",
                    field=field,
                )
            escaped = False
        elif ch == "\\":
            escaped = True
    if escaped:
        raise InvalidArgument(f"{field}: the pattern ends with a lone \\", field=field)
    return value


# -- sorting -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SortKey:
    column: Column
    descending: bool


def sort_keys(spec: Any, schema: TableSchema) -> tuple[SortKey, ...]:
    """The caller's sort (None: by id) with ``id`` last, to make the order total."""
    if spec is None:
        spec = []
    if not isinstance(spec, list) or len(spec) > MAX_SORT_KEYS:
        raise InvalidArgument(f"sort: a list of at most {MAX_SORT_KEYS} keys", field="sort")
    keys: list[SortKey] = []
    for i, item in enumerate(spec):
        at = f"sort[{i}]"
        if not isinstance(item, dict) or not set(item) <= {"column", "direction"}:
            raise InvalidArgument(f"{at}: {{column, direction}}", field=at)
        column = column_of(schema, item.get("column"), field=f"{at}.column")
        direction = item.get("direction", "asc")
        if direction not in ("asc", "desc"):
            raise InvalidArgument(f"{at}.direction: asc or desc", field=f"{at}.direction")
        if column.type not in _SORTABLE:
            raise InvalidArgument(f"{at}: cannot sort by a {column.type} column", field=at)
        if any(k.column.name == column.name for k in keys):
            raise InvalidArgument(f"{at}: {column.name} is already a sort key", field=at)
        keys.append(SortKey(column, direction == "desc"))
        if column.name == names.ID:
            return tuple(keys)
    ident = schema.column(names.ID)
    if ident is None:
        raise InvalidArgument(f"table {schema.name} has no id column", field="table")
    return (*keys, SortKey(ident, False))


def order_by(keys: Sequence[SortKey], table: sa.TableClause) -> list[Any]:
    """NULL is the smallest value, on both dialects. A column that cannot hold NULL (id, a
    NOT NULL column) gets no NULLS clause: PostgreSQL then walks its index in that order
    instead of sorting every row (its indexes keep NULL last)."""
    out = []
    for key in keys:
        col = table.c[key.column.name]
        if not key.column.nullable:
            out.append(col.desc() if key.descending else col.asc())
        else:
            out.append(col.desc().nulls_last() if key.descending else col.asc().nulls_first())
    return out


def after(
    keys: Sequence[SortKey], last: Sequence[Any], table: sa.TableClause
) -> ColumnElement[bool]:
    """Rows after the one whose sort values (as stored) are ``last``, in the order of
    :func:`order_by`: (k0 > v0) OR (k0 = v0 AND k1 > v1) OR ..."""
    ors = []
    equal: list[ColumnElement[bool]] = []
    for key, value in zip(keys, last, strict=True):
        col = table.c[key.column.name]
        at = bound(value)
        if value is None:
            beyond: ColumnElement[bool] | None = None if key.descending else col.is_not(None)
            same: ColumnElement[bool] = col.is_(None)
        else:
            beyond = col > at
            if key.descending:
                beyond = sa.or_(col < at, col.is_(None)) if key.column.nullable else col < at
            same = col == at
        if beyond is not None:
            ors.append(sa.and_(*equal, beyond))
        equal.append(same)
    return sa.or_(*ors) if ors else sa.false()


# -- cursors -------------------------------------------------------------------------------


def query_hash(*parts: Any) -> str:
    """A short hash of what a cursor belongs to (app, table, filter, sort, search text)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def encode_cursor(query: str, position: list[Any]) -> str:
    raw = json.dumps({"q": query, "p": position}, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: Any, query: str) -> list[Any]:
    """The position a cursor of this very query stands for; else an error on ``cursor``."""
    bad = InvalidArgument(
        "cursor: not a cursor of this query",
        hint="pass the next_cursor of the previous page, with the same table, filter and sort",
        field="cursor",
    )
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR:
        raise bad
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        raise bad from None
    if not isinstance(body, dict) or body.get("q") != query or not isinstance(body.get("p"), list):
        raise bad
    return list(body["p"])


def key_position(keys: Sequence[SortKey], row: dict[str, Any]) -> list[Any]:
    """The sort values of a row (as JSON) for the next cursor."""
    return [row[k.column.name] for k in keys]


def stored_position(keys: Sequence[SortKey], position: list[Any], dialect: Dialect) -> list[Any]:
    """A cursor's values checked against their columns' types, as stored."""
    if len(position) != len(keys):
        raise InvalidArgument("cursor: not a cursor of this query", field="cursor")
    return [
        None if v is None else values.to_storage(v, k.column.type, dialect, field="cursor")
        for k, v in zip(keys, position, strict=True)
    ]


# -- projection ----------------------------------------------------------------------------


def projection(spec: Any, schema: TableSchema) -> tuple[Column, ...]:
    """The columns to return (None: all); ``id`` always comes first."""
    if spec is None:
        return schema.columns
    if not isinstance(spec, list) or not spec or len(spec) > len(schema.columns) + 1:
        raise InvalidArgument("columns: a non-empty list of the table's columns", field="columns")
    wanted = {column_of(schema, c, field=f"columns[{i}]").name for i, c in enumerate(spec)}
    return tuple(c for c in schema.columns if c.name in wanted or c.name == names.ID)
