"""What a type change does beside the rows (alter.py does the rows): the column's default,
converted as its values are, and, on PostgreSQL, the query that finds the first row whose
value would not convert, so that the refusal names it (SQLite's rebuild has such checks)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Final

from appdeck.common.errors import InvalidArgument
from appdeck.platform.tables import ddl, names

_INTEGER: Final = re.compile(r"\s*[+-]?\d{1,19}\s*")


def default(old: str, new: str, value: Any, *, field: str) -> Any:
    """``value``, the default of a column going from ``old`` to ``new``, as a default of
    ``new`` converted the way the rows are (issue 20, item 14: integer 0 becomes text
    ``'0'``); :class:`InvalidArgument` saying how to go on when it does not convert."""
    try:
        converted = _convert(old, new, value)
        return ddl.check_default(new, converted, field=field)
    except (InvalidArgument, ValueError, TypeError, OverflowError):
        raise InvalidArgument(
            f"{field}: the column's default {names.shown(repr(value))} does not convert to "
            f"{new}; drop it first (a drop_default change before this one, in the same call) "
            "or set a default of the new type after it",
            hint="add {'op': 'drop_default', 'column': ...} before the change_type",
            field=field,
        ) from None


def _convert(old: str, new: str, value: Any) -> Any:
    if new == "text":
        if isinstance(value, bool):
            return "true" if value else "false"
        if old == "json":
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return value if isinstance(value, str) else str(value)
    if old == "text" and isinstance(value, str):
        if new == "integer":
            if not _INTEGER.fullmatch(value):
                raise ValueError("not an integer")
            return int(value)
        if new == "real":
            return float(value)
        if new == "boolean":
            lowered = value.strip().lower()
            if lowered not in ("true", "false", "1", "0"):
                raise ValueError("not a boolean")
            return lowered in ("true", "1")
        if new == "json":
            return json.loads(value)
        return value  # uuid, timestamp: check_default parses the text
    if new == "real" and not isinstance(value, bool):
        return float(value)
    if new == "integer":
        if isinstance(value, float):  # half away from zero, as round() in SQL
            return int(math.copysign(math.floor(abs(value) + 0.5), value))
        return int(value)
    if new == "boolean" and value in (0, 1) and not isinstance(value, bool):
        return bool(value)
    return value


PG_VALID: Final[dict[tuple[str, str], Callable[[str], str]]] = {
    ("text", "integer"): lambda x: (
        f"CASE WHEN {x} ~ '^\\s*[+-]?[0-9]{{1,19}}\\s*$' THEN {x}::numeric "
        "BETWEEN -9223372036854775808 AND 9223372036854775807 ELSE false END"
    ),
    ("integer", "boolean"): lambda x: f"{x} IN (0, 1)",
}
"""PostgreSQL: the values that convert (the others fail ``ALTER … TYPE``, naming no row)."""


def pg_first_refused(table: str, column: str, old: str, new: str) -> str | None:
    """PostgreSQL: a query for the first row (by id) whose ``column`` would not convert."""
    valid = PG_VALID.get((old, new))
    if valid is None:
        return None
    x = names.quote(column)
    return (
        f"SELECT {names.quote(names.ID)} FROM {names.quote(table)} "  # noqa: S608
        f"WHERE {x} IS NOT NULL AND NOT ({valid(x)}) ORDER BY {names.quote(names.ID)} LIMIT 1"
    )
