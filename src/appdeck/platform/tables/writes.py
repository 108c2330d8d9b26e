"""Rows going into a table: checked against its schema (each refusal names the row and the
field), grouped by the columns they give, and written with one multi-row INSERT per group
(compiled by hand: the identifiers are checked names, quoted; every value is a placeholder).

One statement inserts its rows in order, so their new ids ascend in that order; an upsert
returns each row's key with its id instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from appdeck.common.errors import InvalidArgument, QuotaExceeded
from appdeck.platform.tables import filters, limits, names, values
from appdeck.platform.tables.catalog import Column, TableSchema
from appdeck.platform.tables.filters import bound

Dialect = Literal["sqlite", "postgresql"]

_MAX_PARAMS: Final = 30_000
"""Bound parameters of one statement (SQLite allows 32,766, asyncpg 32,767)."""


@dataclass(frozen=True, slots=True)
class Group:
    """Rows that give the same columns: one statement (or a few, by parameter count)."""

    columns: tuple[Column, ...]
    indexes: list[int]
    params: list[tuple[Any, ...]]


def prepare_rows(
    rows: Any, schema: TableSchema, dialect: Dialect, *, key: Column | None
) -> tuple[int, list[Group]]:
    if not isinstance(rows, list) or not rows:
        raise InvalidArgument("rows: a non-empty list of objects", field="rows")
    limits.at_most(len(rows), limits.ROWS_PER_INSERT, "rows in one call", field="rows")
    by_name = {c.name: c for c in schema.columns}
    groups: dict[tuple[str, ...], Group] = {}
    budget = limits.PAYLOAD_BYTES
    seen: dict[Any, int] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InvalidArgument(f"row {i}: expected an object", field="rows", row=i)
        for name, col in by_name.items():
            if name in row or not _required(col) or (key is not None and col is key):
                continue
            raise InvalidArgument(
                f"row {i}: {name}: required (not null, no default)", field=name, row=i
            )
        out = []
        cols = []
        for name in sorted(row, key=lambda n: (n not in by_name, n)):
            col = _writable(by_name.get(name) if isinstance(name, str) else None, name, i, key)
            value = values.to_storage(row[name], col.type, dialect, field=col.name, row=i)
            if value is None and not col.nullable:
                raise InvalidArgument(
                    f"row {i}: {col.name}: may not be null", field=col.name, row=i
                )
            budget -= len(value) if isinstance(value, str) else 8
            cols.append(col)
            out.append(value)
        if key is not None:
            seen_at = _key_value(row, key, i, seen)
            seen[seen_at] = i
        if budget < 0:
            raise QuotaExceeded(
                f"row {i}: the rows are larger than {limits.PAYLOAD_BYTES} bytes",
                field="rows",
                row=i,
            )
        signature = tuple(c.name for c in cols)
        group = groups.setdefault(signature, Group(tuple(cols), [], []))
        group.indexes.append(i)
        group.params.append(tuple(out))
    return len(rows), list(groups.values())


def _required(col: Column) -> bool:
    return (
        not col.nullable
        and col.default is None
        and col.default_sql is None
        and col.name != names.ID
    )


def _writable(col: Column | None, name: Any, row: int, key: Column | None) -> Column:
    shown = names.shown(name) if isinstance(name, str) else repr(name)
    if col is None:
        raise InvalidArgument(f"row {row}: no column {shown}", field=str(name)[:60], row=row)
    if col.name == names.ID and (key is None or key.name != names.ID):
        raise InvalidArgument(
            f"row {row}: id is assigned by the table",
            field="id",
            row=row,
            hint="leave id out; use update or upsert (on: id) to change a row",
        )
    if not col.known:
        raise InvalidArgument(
            f"row {row}: {col.name} has a type AppDeck cannot write", field=col.name, row=row
        )
    return col


def _key_value(row: dict[str, Any], key: Column, i: int, seen: dict[Any, int]) -> Any:
    value = row.get(key.name)
    if value is None:
        raise InvalidArgument(
            f"row {i}: {key.name}: an upsert needs a value of its key", field=key.name, row=i
        )
    marker = json.dumps(value, sort_keys=True, default=str)
    if marker in seen:
        raise InvalidArgument(
            f"row {i}: {key.name}: the same value as row {seen[marker]}", field=key.name, row=i
        )
    return marker


def unique_key(schema: TableSchema, on: Any) -> Column:
    col = filters.column_of(schema, on, field="on")
    single_unique = any(ix.unique and ix.columns == (col.name,) for ix in schema.indexes)
    if not (col.primary_key or col.unique or single_unique) or not col.known:
        raise InvalidArgument(
            f"on: {col.name} is not unique; upsert needs id or a unique column", field="on"
        )
    return col


def prepare_changes(changes: Any, schema: TableSchema, dialect: Dialect) -> dict[str, Any]:
    if not isinstance(changes, dict) or not changes:
        raise InvalidArgument("values: an object of the columns to set", field="values")
    out: dict[str, Any] = {}
    for name, value in changes.items():
        col = schema.column(name) if names.is_valid(name) else None
        at = f"values.{names.shown(name)[1:-1]}" if isinstance(name, str) else "values"
        if col is None or col.name == names.ID or not col.known:
            raise InvalidArgument(f"{at}: not a column this call can set (id is fixed)", field=at)
        stored = values.to_storage(value, col.type, dialect, field=col.name)
        if stored is None and not col.nullable:
            raise InvalidArgument(f"{col.name}: may not be null", field=col.name)
        out[col.name] = bound(stored)
    return out


def required_target(
    schema: TableSchema,
    target: sa.TableClause,
    dialect: Dialect,
    id: int | None,
    spec: Any,
    verb: str,
) -> Any:
    if (id is None) == (spec is None):
        raise InvalidArgument(
            f"{verb}: pass id or filter (one of them): there is no unfiltered {verb}",
            field="filter",
        )
    if id is not None:
        ident = values.to_storage(id, "integer", dialect, field="id")
        return target.c[names.ID] == bound(ident)
    if spec == {}:
        raise InvalidArgument(f"filter: empty; there is no unfiltered {verb}", field="filter")
    return filters.where(spec, schema, target, dialect)


async def insert(
    conn: AsyncConnection,
    schema: TableSchema,
    dialect: Dialect,
    prepared: tuple[int, list[Group]],
    *,
    on: Column | None,
) -> list[int]:
    total, groups = prepared
    ids: list[int] = [0] * total
    table = names.quote(schema.name)
    for group in groups:
        cols = ", ".join(names.quote(c.name) for c in group.columns)
        width = max(len(group.columns), 1)
        per = max(1, min(limits.ROWS_PER_INSERT, _MAX_PARAMS // width))
        for start in range(0, len(group.params), per):
            chunk = group.params[start : start + per]
            where_ = group.indexes[start : start + per]
            if not group.columns:
                sql = f'INSERT INTO {table} DEFAULT VALUES RETURNING "id"'  # noqa: S608 (quoted)
                for index in where_:
                    ids[index] = int((await conn.exec_driver_sql(sql)).scalar_one())
                continue
            sql = _insert_sql(dialect, table, cols, len(group.columns), len(chunk), on, group)
            flat = tuple(v for row in chunk for v in row)
            returned = [tuple(r) for r in (await conn.exec_driver_sql(sql, flat)).all()]
            if on is None:
                # one statement inserts its rows in order: their new ids ascend in that order
                for index, new in zip(where_, sorted(r[0] for r in returned), strict=True):
                    ids[index] = int(new)
            else:
                position = group.columns.index(on)
                by_key = {_same(r[1], on): int(r[0]) for r in returned}
                for index, row in zip(where_, chunk, strict=True):
                    ids[index] = by_key[_same(row[position], on)]
    return ids


def _insert_sql(
    dialect: Dialect,
    table: str,
    cols: str,
    width: int,
    count: int,
    on: Column | None,
    group: Group,
) -> str:
    if dialect == "sqlite":
        one = "(" + ", ".join("?" * width) + ")"
        rows = ", ".join([one] * count)
    else:
        rows = ", ".join(
            "(" + ", ".join(f"${r * width + c + 1}" for c in range(width)) + ")"
            for r in range(count)
        )
    # identifiers: checked names, quoted; values: placeholders only
    sql = f"INSERT INTO {table} ({cols}) VALUES {rows}"  # noqa: S608
    if on is None:
        return sql + ' RETURNING "id"'
    key = names.quote(on.name)
    sets = ", ".join(
        f"{names.quote(c.name)} = excluded.{names.quote(c.name)}" for c in group.columns
    )
    return f'{sql} ON CONFLICT ({key}) DO UPDATE SET {sets} RETURNING "id", {key}'


def _same(value: Any, col: Column) -> str:
    return json.dumps(values.from_storage(value, col.type), sort_keys=True, default=str)


async def advance_identity(conn: AsyncConnection, schema: TableSchema) -> None:
    """PostgreSQL: after rows with ids of the caller's, the identity goes on after the
    largest id (else the next insert would collide)."""
    table = names.quote(schema.name)
    await conn.execute(
        sa.text(
            "SELECT setval(pg_get_serial_sequence(:t, 'id'), "  # noqa: S608 (a quoted name)
            f'(SELECT coalesce(max("id"), 0) + 1 FROM {table}), false)'
        ),
        {"t": table},
    )
