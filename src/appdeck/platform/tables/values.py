"""Typed values of app tables: a JSON value in, checked against its column's type and turned into
what the dialect stores; a stored value out, turned back into a JSON-safe value.

    type       accepts (JSON)                       SQLite stores          PostgreSQL stores
    text       string, no NUL, <= 1 MiB             TEXT                   text
    integer    integer in int64 (3.0 too)           INTEGER                bigint
    real       finite number                        REAL                   double precision
    boolean    true / false                         0 / 1                  boolean
    timestamp  ISO-8601 string with an offset       '...T..:..:...ffffffZ' timestamptz (UTC)
    json       any JSON value, <= 1 MiB compact     compact JSON text      jsonb (as text)
    uuid       a UUID string                        canonical lowercase    uuid (as text)

Nothing is guessed: a string is not an integer, 1 is not true. A refused value raises
:class:`InvalidArgument` naming the field (and the row, for a batch), so an agent can fix that
one value. Tables the app itself created may hold anything (the app is hostile): values read
back are converted when they fit their declared type and passed through as JSON-safe text
otherwise, never raising.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any, Final, Literal

from appdeck.common.errors import InvalidArgument

ColumnType = Literal["text", "integer", "real", "boolean", "timestamp", "json", "uuid"]
Dialect = Literal["sqlite", "postgresql"]

TYPES: Final[tuple[str, ...]] = ("text", "integer", "real", "boolean", "timestamp", "json", "uuid")
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
MAX_VALUE_BYTES: Final = 1024 * 1024
"""One value (text, json): the limit of limits.py, repeated here so values.py stands alone."""
MAX_JSON_DEPTH: Final = 64
"""A JSON value nests arrays and objects at most this deep (a deeper one the app wrote itself
reads back as its text)."""
_TS_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"


def where(field: str, row: int | None) -> dict[str, Any]:
    """The details of an error about ``field`` (of row ``row`` of a batch)."""
    return {"field": field} if row is None else {"field": field, "row": row}


def _refuse(message: str, field: str, row: int | None, hint: str | None = None) -> InvalidArgument:
    prefix = f"row {row}: " if row is not None else ""
    return InvalidArgument(f"{prefix}{field}: {message}", hint=hint, **where(field, row))


def check(value: Any, type_: str, *, field: str, row: int | None = None) -> Any:
    """``value`` (never None: nullability is the caller's rule) as the Python value of its type:
    str, int, float, bool, an aware UTC datetime, a JSON value (checked) or a UUID string."""
    match type_:
        case "text":
            return _text(value, field, row)
        case "integer":
            return _integer(value, field, row)
        case "real":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _refuse(f"expected a number, got {_kind(value)}", field, row)
            number = float(value) if isinstance(value, float) or abs(value) < 2**53 else None
            if number is None or not math.isfinite(number):
                raise _refuse("expected a finite number (or an integer below 2^53)", field, row)
            return number
        case "boolean":
            if not isinstance(value, bool):
                raise _refuse(f"expected true or false, got {_kind(value)}", field, row)
            return value
        case "timestamp":
            return _timestamp(value, field, row)
        case "json":
            _json_text(value, field, row)
            return value
        case "uuid":
            if not isinstance(value, str) or len(value) > 64:
                raise _refuse(f"expected a UUID string, got {_kind(value)}", field, row)
            try:
                return str(uuid.UUID(value))
            except ValueError:
                raise _refuse("not a UUID (e.g. 0b6c...-...)", field, row) from None
    raise _refuse(f"the column's type {type_!r} cannot be written", field, row)


def to_storage(
    value: Any, type_: str, dialect: Dialect, *, field: str, row: int | None = None
) -> Any:
    """``value`` checked and in the form the dialect's driver binds (None stays None)."""
    if value is None:
        return None
    if type_ == "json":
        return _json_text(value, field, row)
    checked = check(value, type_, field=field, row=row)
    if type_ == "boolean" and dialect == "sqlite":
        return 1 if checked else 0
    if type_ == "timestamp" and dialect == "sqlite":
        return checked.strftime(_TS_FORMAT)
    return checked


def from_storage(value: Any, type_: str) -> Any:
    """A stored value as JSON (str, int, float, bool, None, lists and objects). Whatever an
    app wrote outside its declared type comes back as it is (numbers, text) or as text."""
    if value is None or type_ == "unknown":
        return _json_safe(value)
    try:
        match type_:
            case "boolean" if isinstance(value, int):
                return bool(value)
            case "timestamp" if isinstance(value, datetime):
                aware = value if value.tzinfo else value.replace(tzinfo=UTC)
                return aware.astimezone(UTC).strftime(_TS_FORMAT)
            case "json" if isinstance(value, str | bytes):
                loaded = json.loads(value, parse_constant=_no_constant)
                # the app's own JSON, past the depth we take, comes back as its text
                return loaded if depth(loaded) <= MAX_JSON_DEPTH else _json_safe(value)
            case "json" if isinstance(value, dict | list | int | float | bool):
                return value
            case "uuid" if isinstance(value, uuid.UUID):
                return str(value)
            case "real" if isinstance(value, float) and not math.isfinite(value):
                return str(value)
    except (ValueError, UnicodeDecodeError, RecursionError):
        pass
    return _json_safe(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def depth(value: Any) -> int:
    """How deeply ``value`` nests arrays and objects (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            level += 1
            deepest = max(deepest, level)
            stack.extend((v, level) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _text(value: Any, field: str, row: int | None) -> str:
    if not isinstance(value, str):
        raise _refuse(f"expected a string, got {_kind(value)}", field, row)
    if "\x00" in value:
        raise _refuse("text may not contain NUL (U+0000)", field, row)
    if len(value) * 4 > MAX_VALUE_BYTES and len(value.encode("utf-8", "surrogatepass")) > (
        MAX_VALUE_BYTES
    ):
        raise _refuse(f"longer than {MAX_VALUE_BYTES} bytes", field, row)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse("not valid Unicode (a lone surrogate)", field, row) from None
    return value


def _integer(value: Any, field: str, row: int | None) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(f"expected an integer, got {_kind(value)}", field, row)
    if not INT64_MIN <= value <= INT64_MAX:
        raise _refuse("out of range (a 64-bit signed integer)", field, row)
    return value


def _timestamp(value: Any, field: str, row: int | None) -> datetime:
    hint = "e.g. 2026-01-31T12:00:00Z or 2026-01-31T13:00:00+01:00"
    if not isinstance(value, str) or len(value) > 64:
        raise _refuse(f"expected an ISO-8601 timestamp string, got {_kind(value)}", field, row)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _refuse("not an ISO-8601 timestamp", field, row, hint) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise _refuse("a timestamp needs an offset (Z or +hh:mm)", field, row, hint)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise _refuse("out of range once in UTC", field, row) from None


def _json_text(value: Any, field: str, row: int | None) -> str:
    if depth(value) > MAX_JSON_DEPTH:
        raise _refuse(f"nested deeper than {MAX_JSON_DEPTH} levels", field, row)
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise _refuse("not a JSON value (or a number that is not finite)", field, row) from None
    if len(text) > MAX_VALUE_BYTES // 4 and len(text.encode("utf-8", "surrogatepass")) > (
        MAX_VALUE_BYTES
    ):
        raise _refuse(f"larger than {MAX_VALUE_BYTES} bytes as JSON", field, row)
    if "\\u0000" in text or "\x00" in text:
        raise _refuse("JSON may not contain NUL (U+0000)", field, row)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse("not valid Unicode (a lone surrogate)", field, row) from None
    return text


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
