"""Identifiers of tables, columns and indexes: validated against one strict pattern, then
always quoted. Names with ``__`` are ours (the full-text objects), never an app's.

Everything here is pure: the caller's value is checked before any SQL is built, and the
error names the argument (``field``) that carried it.
"""

from __future__ import annotations

import re
from typing import Final

from appdeck.common.errors import InvalidArgument

PATTERN: Final = r"[a-z_][a-z0-9_]*"
MAX_LENGTH: Final = 48
RESERVED_PREFIXES: Final = ("_appdeck", "sqlite_", "pg_")
ID: Final = "id"
"""The auto primary key of every table: never declared, dropped, renamed or retyped."""
FTS_COLUMN: Final = "__fts"
"""PostgreSQL: the stored generated tsvector column of a table with full-text columns."""

_IDENT = re.compile(PATTERN)
_SHOWN = 60
"""How much of a refused value an error message repeats."""


def check(value: object, *, field: str, what: str = "name") -> str:
    """``value`` if it is a valid identifier; else :class:`InvalidArgument` naming ``field``."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field}: a {what} must be a string", field=field)
    problem = _problem(value)
    if problem is not None:
        raise InvalidArgument(
            f"{field}: {shown(value)} is not a valid {what}: {problem}",
            hint=f"use 1 to {MAX_LENGTH} characters a-z, 0-9 and _, starting with a letter or _",
            field=field,
        )
    return value


def is_valid(value: object) -> bool:
    return isinstance(value, str) and _problem(value) is None


def _problem(value: str) -> str | None:
    if not value:
        return "it is empty"
    if len(value) > MAX_LENGTH:
        return f"it is longer than {MAX_LENGTH} characters"
    if not _IDENT.fullmatch(value):
        return "only a-z, 0-9 and _ are allowed, and it may not start with a digit"
    if value.startswith(RESERVED_PREFIXES):
        return f"names starting with {', '.join(RESERVED_PREFIXES)} are reserved"
    if "__" in value:
        return "names containing __ are reserved"
    return None


def check_table(value: object, *, field: str = "table") -> str:
    return check(value, field=field, what="table name")


def check_column(value: object, *, field: str = "column") -> str:
    """A column the caller declares, drops, renames or retypes: never ``id``."""
    name = check(value, field=field, what="column name")
    if name == ID:
        raise InvalidArgument(
            f"{field}: id is the table's automatic primary key; it cannot be declared or changed",
            field=field,
        )
    return name


def check_index(value: object, *, field: str = "index") -> str:
    return check(value, field=field, what="index name")


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier (both dialects). Only ever given a name that
    passed :func:`check` or one of ours built from such a name; quoting still doubles any
    ``"`` so that nothing else could ever end the identifier."""
    if "\x00" in name:
        raise ValueError("NUL in an identifier")
    return '"' + name.replace('"', '""') + '"'


def shown(value: str) -> str:
    """A refused value as an error message may repeat it: short, printable, quoted."""
    text = value if len(value) <= _SHOWN else value[:_SHOWN] + "…"
    return repr(text)


# -- our own objects, derived from a valid table name -------------------------------------


def fts_table(table: str) -> str:
    """SQLite: the FTS5 external-content table of ``table``."""
    return f"{table}__fts"


def fts_triggers(table: str) -> tuple[str, str, str]:
    """SQLite: the insert, delete and update triggers that keep :func:`fts_table` in sync."""
    return f"{table}__fts_ai", f"{table}__fts_ad", f"{table}__fts_au"


def fts_gin(table: str) -> str:
    """PostgreSQL: the GIN index on the table's :data:`FTS_COLUMN`."""
    return f"{table}__fts_gin"


def rebuild_table(table: str) -> str:
    """SQLite: the new table a rebuild builds before it takes the old one's place."""
    return f"{table}__new"


def default_index(table: str, columns: tuple[str, ...]) -> str:
    """The name of an index declared without one; :class:`InvalidArgument` when too long."""
    name = f"{table}_{'_'.join(columns)}_idx"
    if not is_valid(name):
        raise InvalidArgument(
            f"the index on {', '.join(columns)} needs a name "
            "(the default one, <table>_<columns>_idx, is too long or has __)",
            field="indexes",
        )
    return name
