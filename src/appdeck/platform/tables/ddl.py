"""The SQL of a table's schema, built from checked declarations (pure: no I/O).

Identifiers reach the SQL only through :func:`names.quote` after :mod:`names` checked them;
a default reaches it only as a literal rendered here from a value checked for its type
(:func:`check_default`): a number from an ``int``/``float``, a boolean as ``1``/``0`` or
``true``/``false``, anything else as a single-quoted string with ``'`` doubled. Nothing
the caller sends is ever pasted in as SQL.
"""

# ruff: noqa: S608  (the SQL here is built from checked, quoted identifiers and rendered literals)
from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from appdeck.common.errors import InvalidArgument
from appdeck.platform.tables import limits, names, values
from appdeck.platform.tables.catalog import PG_TYPES, SQLITE_TYPES, TYPES, Column, Dialect, Index
from appdeck.platform.tables.names import quote

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
DEFAULT_BYTES: Final = 4096
"""A default is at most 4 KiB (as stored text)."""


@dataclass(frozen=True, slots=True)
class IndexSpec:
    """An index as declared: its name is derived from the table and columns when left out."""

    columns: tuple[str, ...]
    unique: bool = False
    name: str | None = None


# -- values --------------------------------------------------------------------------------


def check_default(col_type: str, value: Any, *, field: str) -> Any:
    """``value`` as the default of a ``col_type`` column, normalized (a timestamp as
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, a uuid in lowercase); else :class:`InvalidArgument`."""
    if value is None:
        return None
    if col_type == "json" and values.depth(value) > values.MAX_JSON_DEPTH:
        raise InvalidArgument(  # before anything else: json.dumps recurses
            f"{field}: a json default may nest arrays and objects at most "
            f"{values.MAX_JSON_DEPTH} levels deep",
            field=field,
        )
    normal = _normal(col_type, value)
    if normal is None:
        raise InvalidArgument(
            f"{field}: {names.shown(repr(value))} is not a valid {col_type} default", field=field
        )
    text = normal if isinstance(normal, str) else json.dumps(normal, ensure_ascii=False)
    try:
        size = len(text.encode("utf-8"))  # a lone surrogate fails here, as in a value
    except UnicodeEncodeError:
        size = DEFAULT_BYTES + 1
    if size > DEFAULT_BYTES or "\x00" in text or "\\u0000" in text:
        raise InvalidArgument(
            f"{field}: a default is at most {DEFAULT_BYTES} bytes of valid Unicode, without NUL",
            field=field,
        )
    return normal


def _normal(col_type: str, value: Any) -> Any:
    if col_type == "text":
        return value if isinstance(value, str) else None
    if col_type == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
        return value if ok and INT64_MIN <= value <= INT64_MAX else None
    if col_type == "real":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        number = float(value)
        return number if math.isfinite(number) else None
    if col_type == "boolean":
        return value if isinstance(value, bool) else None
    if col_type == "timestamp":
        return timestamp_text(value)
    if col_type == "uuid":
        try:
            return str(uuid.UUID(value)) if isinstance(value, str) and len(value) <= 64 else None
        except ValueError:
            return None
    if col_type == "json":
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            return None
        return value
    return None


def timestamp_text(value: Any) -> str | None:
    """An ISO-8601 timestamp as stored: UTC, microseconds, ``Z`` (a naive one is UTC)."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_DIALECTS: Final[dict[str, sa.engine.Dialect]] = {
    "sqlite": sqlite.dialect(),
    "postgresql": postgresql.dialect(),  # type: ignore[no-untyped-call]
}
_SA_TYPES: Final[dict[str, sa.types.TypeEngine[Any]]] = {
    "integer": sa.BigInteger(),
    "real": sa.Float(),
    "boolean": sa.Boolean(),
}


def literal(dialect: Dialect, col_type: str, value: Any) -> str:
    """A checked default as SQL text: SQLAlchemy's literal rendering for its type (a string
    single-quoted with ``'`` doubled; numbers and booleans as the dialect writes them)."""
    if col_type == "json":
        value = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    sa_type = _SA_TYPES.get(col_type, sa.Text()) if not isinstance(value, str) else sa.Text()
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("only checked values are rendered")
    if not isinstance(value, str | bool | int | float):
        raise ValueError("only checked values are rendered")
    compiled = sa.literal(value, sa_type).compile(
        dialect=_DIALECTS[dialect], compile_kwargs={"literal_binds": True}
    )
    return str(compiled)


# -- columns and tables --------------------------------------------------------------------


def sql_type(dialect: Dialect, col_type: str) -> str:
    if col_type not in TYPES:
        raise InvalidArgument(f"unknown type {names.shown(col_type)}", field="type")
    return SQLITE_TYPES[col_type] if dialect == "sqlite" else PG_TYPES[col_type]


def column_sql(dialect: Dialect, column: Column, *, unique: bool = True) -> str:
    parts = [quote(column.name), sql_type(dialect, column.type)]
    if not column.nullable:
        parts.append("NOT NULL")
    if column.default is not None:
        parts.append("DEFAULT " + literal(dialect, column.type, column.default))
    if column.unique and unique:
        parts.append("UNIQUE")
    return " ".join(parts)


def id_column(dialect: Dialect) -> str:
    if dialect == "sqlite":
        return '"id" INTEGER PRIMARY KEY AUTOINCREMENT'
    return '"id" bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY'


def create_table(dialect: Dialect, table: str, columns: Sequence[Column]) -> str:
    body = ", ".join([id_column(dialect), *(column_sql(dialect, c) for c in columns)])
    return f"CREATE TABLE {quote(table)} ({body})"


def create_index(table: str, index: Index) -> str:
    cols = ", ".join(quote(c) for c in index.columns)
    unique = "UNIQUE " if index.unique else ""
    return f"CREATE {unique}INDEX {quote(index.name)} ON {quote(table)} ({cols})"


def drop_index(index: str) -> str:
    return f"DROP INDEX {quote(index)}"


def check_columns(
    columns: Sequence[Column], *, field: str = "columns", existing: int = 0
) -> list[Column]:
    """Declared columns, checked: names, types, defaults; at most the limit with ``id``."""
    limits.at_most(existing + len(columns) + 1, limits.COLUMNS_PER_TABLE, "columns", field=field)
    seen: set[str] = set()
    checked = []
    for i, column in enumerate(columns):
        where = f"{field}/{i}"
        name = names.check_column(column.name, field=f"{where}/name")
        if name in seen:
            raise InvalidArgument(f"{where}/name: column {name} is declared twice", field=where)
        seen.add(name)
        if column.type not in TYPES:
            raise InvalidArgument(
                f"{where}/type: {names.shown(str(column.type))} is not one of {', '.join(TYPES)}",
                field=f"{where}/type",
            )
        default = check_default(column.type, column.default, field=f"{where}/default")
        checked.append(
            Column(name, column.type, column.nullable, default, column.unique, primary_key=False)
        )
    return checked


def check_indexes(
    table: str,
    specs: Sequence[IndexSpec],
    columns: Sequence[str],
    *,
    field: str = "indexes",
    one: bool = False,
) -> list[Index]:
    """Declared indexes, checked against the table's ``columns`` (``one``: ``field`` names
    the one index, not a list of them)."""
    out: list[Index] = []
    for i, spec in enumerate(specs):
        where = field if one else f"{field}/{i}"
        if not spec.columns:
            raise InvalidArgument(f"{where}/columns: name at least one column", field=where)
        limits.at_most(
            len(spec.columns), limits.COLUMNS_PER_INDEX, "index columns", field=f"{where}/columns"
        )
        cols = tuple(
            known_column(c, columns, field=f"{where}/columns/{j}")
            for j, c in enumerate(spec.columns)
        )
        if len(set(cols)) != len(cols):
            raise InvalidArgument(f"{where}/columns: a column is named twice", field=where)
        name = (
            names.check_index(spec.name, field=f"{where}/name")
            if spec.name is not None
            else names.default_index(table, cols)
        )
        out.append(Index(name, cols, spec.unique))
    return out


def known_column(name: Any, columns: Sequence[str], *, field: str) -> str:
    """``name`` if it is one of ``columns`` (``id`` included); else the error naming it."""
    checked = names.check(name, field=field, what="column name")
    if checked not in columns:
        raise InvalidArgument(f"{field}: the table has no column {checked}", field=field)
    return checked


# -- full text -----------------------------------------------------------------------------


def fulltext_create(dialect: Dialect, table: str, columns: Sequence[str]) -> list[str]:
    """The statements that add full text on ``columns`` to ``table`` (and index its rows)."""
    cols = [quote(c) for c in columns]
    if dialect == "postgresql":
        doc = " || ' ' || ".join(f"coalesce({c}, '')" for c in cols)
        comment = literal(dialect, "json", list(columns))
        fts = quote(names.FTS_COLUMN)
        return [
            f"ALTER TABLE {quote(table)} ADD COLUMN {fts} tsvector "
            f"GENERATED ALWAYS AS (to_tsvector('simple', {doc})) STORED",
            f"CREATE INDEX {quote(names.fts_gin(table))} ON {quote(table)} USING gin ({fts})",
            f"COMMENT ON COLUMN {quote(table)}.{fts} IS {comment}",
        ]
    fts, t = quote(names.fts_table(table)), quote(table)
    listed = ", ".join(cols)
    new = ", ".join(f"new.{c}" for c in cols)
    old = ", ".join(f"old.{c}" for c in cols)
    insert, delete, update = (quote(n) for n in names.fts_triggers(table))
    add = f'INSERT INTO {fts}(rowid, {listed}) VALUES (new."id", {new});'
    remove = f"INSERT INTO {fts}({fts}, rowid, {listed}) VALUES ('delete', old.\"id\", {old});"
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5({listed}, content={literal(dialect, 'text', table)}"
        ", content_rowid='id')",
        f"CREATE TRIGGER {insert} AFTER INSERT ON {t} BEGIN {add} END",
        f"CREATE TRIGGER {delete} AFTER DELETE ON {t} BEGIN {remove} END",
        f"CREATE TRIGGER {update} AFTER UPDATE ON {t} BEGIN {remove} {add} END",
        f"INSERT INTO {fts}({fts}) VALUES ('rebuild')",
    ]


def fulltext_drop(dialect: Dialect, table: str) -> list[str]:
    if dialect == "postgresql":
        return [f"ALTER TABLE {quote(table)} DROP COLUMN {quote(names.FTS_COLUMN)}"]
    triggers = [f"DROP TRIGGER IF EXISTS {quote(t)}" for t in names.fts_triggers(table)]
    return [*triggers, f"DROP TABLE IF EXISTS {quote(names.fts_table(table))}"]


def check_fulltext(
    columns: Sequence[Any], table_columns: Sequence[Column], *, field: str = "fulltext"
) -> tuple[str, ...]:
    """Full-text columns, checked: each a text column of the table, once."""
    limits.at_most(len(columns), limits.FULLTEXT_COLUMNS, "full-text columns", field=field)
    text = [c.name for c in table_columns if c.type == "text"]
    every = [c.name for c in table_columns]
    out: list[str] = []
    for i, name in enumerate(columns):
        checked = known_column(name, [*every, names.ID], field=f"{field}/{i}")
        if checked not in text:
            raise InvalidArgument(
                f"{field}/{i}: only text columns can be full-text ({checked} is not text)",
                field=f"{field}/{i}",
            )
        if checked in out:
            raise InvalidArgument(f"{field}/{i}: {checked} is named twice", field=f"{field}/{i}")
        out.append(checked)
    return tuple(out)
