"""What an app's database holds, read back from the database itself (no metadata table).

The app is hostile: it can create, alter or drop anything in its own database through
``DATABASE_URL``. Whatever is read back is validated: a table whose name is not a valid
identifier is not listed, a declared type we do not know is type ``unknown`` (read-only), a
default we cannot parse is reported as SQL text (``default_sql``), and our own objects
(names with ``__``) are never listed as tables, columns or indexes.

    SQLite      pragma_table_info / pragma_index_list / pragma_index_info (bound parameters)
    PostgreSQL  pg_catalog in current_schema() (the app's own schema, set by AppDatabases)
"""

from __future__ import annotations

import json
import re
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from appdeck.platform.tables import names, values

Dialect = Literal["sqlite", "postgresql"]
ColumnType = Literal["text", "integer", "real", "boolean", "timestamp", "json", "uuid"]
TYPES: Final[tuple[ColumnType, ...]] = (
    "text",
    "integer",
    "real",
    "boolean",
    "timestamp",
    "json",
    "uuid",
)
UNKNOWN: Final = "unknown"
"""The type of a column the app created with a type outside :data:`TYPES`: read-only."""

SQLITE_TYPES: Final[dict[str, str]] = {t: t.upper() for t in TYPES}
PG_TYPES: Final[dict[str, str]] = {
    "text": "text",
    "integer": "bigint",
    "real": "double precision",
    "boolean": "boolean",
    "timestamp": "timestamptz",
    "json": "jsonb",
    "uuid": "uuid",
}
_PG_READ: Final = {
    "text": "text",
    "bigint": "integer",
    "double precision": "real",
    "boolean": "boolean",
    "timestamp with time zone": "timestamp",
    "jsonb": "json",
    "uuid": "uuid",
}
_SQLITE_READ: Final = {v: k for k, v in SQLITE_TYPES.items()}

DEFAULT_SQL_SHOWN: Final = 200


class Databases(Protocol):
    """What the table services need of AppDatabases (platform/tables/databases.py)."""

    @property
    def dialect(self) -> Dialect: ...

    def transaction(
        self, app_id: int, *, timeout_s: float = ..., readonly: bool = ..., cascades: bool = ...
    ) -> AbstractAsyncContextManager[AsyncConnection]: ...


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str
    """One of :data:`TYPES`, or ``unknown``."""
    nullable: bool = True
    default: Any = None
    """The default as a typed value (None: no default, or one that is SQL: ``default_sql``)."""
    unique: bool = False
    primary_key: bool = False
    default_sql: str | None = None
    """A default that is not a plain value (an app's own ``DEFAULT (random())``), as SQL text."""

    @property
    def known(self) -> bool:
        return self.type in TYPES


@dataclass(frozen=True, slots=True)
class Index:
    name: str
    columns: tuple[str, ...]
    unique: bool = False


@dataclass(frozen=True, slots=True)
class TableSchema:
    name: str
    columns: tuple[Column, ...]
    indexes: tuple[Index, ...] = ()
    fulltext: tuple[str, ...] = ()
    row_estimate: int = 0

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def index(self, name: str) -> Index | None:
        return next((i for i in self.indexes if i.name == name), None)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def public(self) -> dict[str, Any]:
        """As JSON: ``default_sql`` only where there is one."""
        return {
            "table": self.name,
            "columns": [
                {
                    "name": c.name,
                    "type": c.type,
                    "nullable": c.nullable,
                    "default": c.default,
                    "unique": c.unique,
                    "primary_key": c.primary_key,
                    **({"default_sql": c.default_sql} if c.default_sql else {}),
                }
                for c in self.columns
            ],
            "indexes": [
                {"name": i.name, "columns": list(i.columns), "unique": i.unique}
                for i in self.indexes
            ],
            "fulltext": list(self.fulltext),
            "row_estimate": self.row_estimate,
        }


# -- listing -------------------------------------------------------------------------------


async def list_tables(conn: AsyncConnection, dialect: Dialect) -> list[str]:
    """The app's tables, sorted; our own objects and invalid names left out."""
    if dialect == "sqlite":
        query = sa.text(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
        )
    else:
        query = sa.text(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = "
            "(SELECT oid FROM pg_namespace WHERE nspname = current_schema()) "
            "AND c.relkind IN ('r', 'p')"
        )
    found = (await conn.execute(query)).scalars().all()
    return sorted(name for name in found if names.is_valid(name))


async def describe(conn: AsyncConnection, dialect: Dialect, name: str) -> TableSchema | None:
    """The schema of table ``name`` (a valid identifier), or None when there is none."""
    if not names.is_valid(name):
        return None
    if dialect == "sqlite":
        return await _describe_sqlite(conn, name)
    return await _describe_pg(conn, name)


async def row_estimate(conn: AsyncConnection, dialect: Dialect, name: str) -> int:
    """The table's row count: exact up to 10,000 rows, then SQLite counts and PostgreSQL
    estimates (``reltuples``, at least 10,001)."""
    table = names.quote(name)  # a checked name, quoted: the only text put into the SQL
    if dialect == "sqlite":
        every = sa.text(f"SELECT count(*) FROM {table}")  # noqa: S608
        return int((await conn.execute(every)).scalar_one())
    first = sa.text(f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT 10001) s")  # noqa: S608
    counted = int((await conn.execute(first)).scalar_one())
    if counted <= 10000:
        return counted
    estimate = (
        await conn.execute(
            sa.text("SELECT reltuples FROM pg_class WHERE oid = to_regclass(:t)"),
            {"t": f"{table}"},
        )
    ).scalar()
    return max(int(estimate or 0), counted)


# -- SQLite --------------------------------------------------------------------------------


async def _describe_sqlite(conn: AsyncConnection, name: str) -> TableSchema | None:
    kind = (
        await conn.execute(
            sa.text("SELECT type FROM sqlite_master WHERE name = :n AND type = 'table'"),
            {"n": name},
        )
    ).scalar()
    if kind is None:
        return None
    info = (
        await conn.execute(
            sa.text('SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(:t)'),
            {"t": name},
        )
    ).all()
    unique: set[str] = set()
    indexes: list[Index] = []
    index_list = (
        await conn.execute(
            sa.text('SELECT name, "unique", origin FROM pragma_index_list(:t)'), {"t": name}
        )
    ).all()
    for index_name, is_unique, origin in index_list:
        cols = await _sqlite_index_columns(conn, index_name)
        if cols is None:
            continue
        if origin == "u" and len(cols) == 1:
            unique.add(cols[0])
        elif origin == "c" and names.is_valid(index_name):
            indexes.append(Index(index_name, cols, bool(is_unique)))
    columns = []
    for col_name, declared, notnull, default, pk in info:
        if not names.is_valid(col_name) and col_name != names.ID:
            continue
        col_type = _SQLITE_READ.get(str(declared).upper(), UNKNOWN)
        is_pk = bool(pk)
        value, sql = _parse_default(default, col_type, "sqlite")
        columns.append(
            Column(
                col_name,
                col_type,
                nullable=not (notnull or is_pk),
                default=value,
                unique=col_name in unique or is_pk,
                primary_key=is_pk,
                default_sql=sql,
            )
        )
    fulltext = await _sqlite_fulltext(conn, name, columns)
    return TableSchema(name, tuple(columns), tuple(sorted(indexes, key=lambda i: i.name)), fulltext)


async def _sqlite_index_columns(conn: AsyncConnection, index: str) -> tuple[str, ...] | None:
    rows = (
        (
            await conn.execute(
                sa.text("SELECT name FROM pragma_index_info(:i) ORDER BY seqno"), {"i": index}
            )
        )
        .scalars()
        .all()
    )
    if not rows or any(r is None or not isinstance(r, str) for r in rows):
        return None  # an expression index (the app's own): not ours to describe
    return tuple(rows)


async def _sqlite_fulltext(
    conn: AsyncConnection, name: str, columns: list[Column]
) -> tuple[str, ...]:
    fts = names.fts_table(name)
    sql = (
        await conn.execute(
            sa.text("SELECT sql FROM sqlite_master WHERE name = :n AND type = 'table'"),
            {"n": fts},
        )
    ).scalar()
    if not isinstance(sql, str) or "fts5" not in sql.lower():
        return ()
    cols = (
        (await conn.execute(sa.text("SELECT name FROM pragma_table_info(:t)"), {"t": fts}))
        .scalars()
        .all()
    )
    return _valid_fulltext(cols, columns)


def _valid_fulltext(found: Any, columns: list[Column]) -> tuple[str, ...]:
    """The full-text columns as read back: each a text column of the table, else none."""
    text = {c.name for c in columns if c.type == "text"}
    if not isinstance(found, list | tuple) or not found:
        return ()
    if not all(isinstance(c, str) and c in text for c in found):
        return ()
    return tuple(dict.fromkeys(found))


# -- PostgreSQL ----------------------------------------------------------------------------

_PG_COLUMNS = sa.text(
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
    "pg_get_expr(d.adbin, d.adrelid), a.attgenerated::text, col_description(c.oid, a.attnum) "
    "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
    "LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum "
    "WHERE c.oid = :oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)
_PG_CONSTRAINTS = sa.text(
    "SELECT con.contype::text, "
    "array(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(n, o) "
    "JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n ORDER BY k.o)::text[] "
    "FROM pg_constraint con WHERE con.conrelid = :oid AND con.contype IN ('p', 'u')"
)
_PG_INDEXES = sa.text(
    "SELECT i.relname, ix.indisunique, ix.indexprs IS NOT NULL, "
    "array(SELECT a.attname FROM unnest(ix.indkey) WITH ORDINALITY k(n, o) "
    "JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.n ORDER BY k.o)::text[], "
    "ix.indnatts FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid "
    "WHERE ix.indrelid = :oid AND NOT EXISTS "
    "(SELECT 1 FROM pg_constraint con WHERE con.conindid = ix.indexrelid)"
)


async def _describe_pg(conn: AsyncConnection, name: str) -> TableSchema | None:
    oid = (
        await conn.execute(
            sa.text(
                "SELECT c.oid FROM pg_class c WHERE c.relname = :n AND c.relkind IN ('r', 'p') "
                "AND c.relnamespace = "
                "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
            ),
            {"n": name},
        )
    ).scalar()
    if oid is None:
        return None
    primary: set[str] = set()
    unique: set[str] = set()
    for kind, cols in (await conn.execute(_PG_CONSTRAINTS, {"oid": oid})).all():
        if len(cols) == 1:
            (primary if kind == "p" else unique).add(cols[0])
    fulltext_comment: str | None = None
    raw_columns = []
    for col_name, declared, notnull, default, generated, comment in (
        await conn.execute(_PG_COLUMNS, {"oid": oid})
    ).all():
        if col_name == names.FTS_COLUMN and generated == "s":
            fulltext_comment = comment
            continue
        if not names.is_valid(col_name) and col_name != names.ID:
            continue
        col_type = _PG_READ.get(declared, UNKNOWN)
        is_pk = col_name in primary
        value, sql = (None, None) if is_pk else _parse_default(default, col_type, "postgresql")
        raw_columns.append(
            Column(
                col_name,
                col_type,
                nullable=not (notnull or is_pk),
                default=value,
                unique=col_name in unique or is_pk,
                primary_key=is_pk,
                default_sql=sql,
            )
        )
    indexes = []
    for index_name, is_unique, has_exprs, cols, natts in (
        await conn.execute(_PG_INDEXES, {"oid": oid})
    ).all():
        if has_exprs or len(cols) != natts or not names.is_valid(index_name):
            continue
        indexes.append(Index(index_name, tuple(cols), bool(is_unique)))
    fulltext = _valid_fulltext(_json_list(fulltext_comment), raw_columns)
    return TableSchema(
        name, tuple(raw_columns), tuple(sorted(indexes, key=lambda i: i.name)), fulltext
    )


def _json_list(text: str | None) -> Any:
    if text is None or len(text) > 100_000:
        return None
    try:
        loaded = json.loads(text)
    except (ValueError, RecursionError):
        return None
    # an app's own default deeper than a value may be is shown as its SQL text
    return loaded if values.depth(loaded) <= values.MAX_JSON_DEPTH else None


# -- defaults ------------------------------------------------------------------------------

_QUOTED = re.compile(r"'((?:[^']|'')*)'(?:::[a-z ]+)?", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _parse_default(sql: str | None, col_type: str, dialect: Dialect) -> tuple[Any, str | None]:
    """``(value, None)`` for a plain literal default of ``col_type``, ``(None, None)`` for
    none, ``(None, sql)`` for anything else (an expression of the app's own)."""
    if sql is None:
        return None, None
    text = sql.strip()
    if text.upper() == "NULL":
        return None, None
    other = (None, text[:DEFAULT_SQL_SHOWN])
    quoted = _QUOTED.fullmatch(text)
    if quoted is not None:
        raw = quoted.group(1).replace("''", "'")
        if col_type in ("text", "timestamp", "uuid"):
            return raw, None
        if col_type == "json":
            parsed = _json_list(raw)
            return (parsed, None) if parsed is not None or raw == "null" else other
        text = raw
    if col_type == "boolean":
        lowered = text.lower()
        if lowered in ("true", "false") or (dialect == "sqlite" and text in ("0", "1")):
            return lowered in ("true", "1"), None
        return other
    if col_type in ("integer", "real") and _NUMBER.fullmatch(text.strip("()")):
        number = text.strip("()")
        if col_type == "integer" and re.fullmatch(r"-?\d+", number):
            return int(number), None
        return float(number), None
    return other
