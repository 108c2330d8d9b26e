"""Attacker text made fit to show: bounded, its invisible characters made visible.

Table cells, API summaries and CI logs are an app's (or its users') text. Autoescaping keeps
their markup inert; this keeps them short (a cell shows at most :data:`CELL_CHARS`
characters) and honest: control characters (a NUL, an ANSI escape) and the bidirectional
overrides that make text read otherwise than it is stored are shown as ``\\x00``, ``\\u202e``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

CELL_CHARS: Final = 200
"""A table cell or an API summary shows at most this many characters, then an ellipsis."""
ELLIPSIS: Final = "…"

_BIDI: Final = (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _escapes(keep: str) -> dict[int, str]:
    table: dict[int, str] = {}
    for code in [*range(0x20), *range(0x7F, 0xA0), *_BIDI]:
        if chr(code) not in keep:
            table[code] = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return table


_CELL: Final = _escapes(keep="")
_LOG: Final = _escapes(keep="\n\t")


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with control and bidi characters spelled out (``lines``: newlines and tabs
    kept, as in a log)."""
    out = text.translate(_LOG if lines else _CELL)
    # lone surrogates (a JSON \\ud800 stored as text) cannot be encoded into the page
    return out.encode("utf-8", "backslashreplace").decode("utf-8") if _has_surrogate(out) else out


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@dataclass(frozen=True, slots=True)
class Cell:
    """One value as a page shows it."""

    text: str
    kind: str
    """``null``, ``text``, ``number``, ``boolean``, ``json`` or ``bytes`` (a CSS class)."""
    cut: int | None = None
    """The value's full length in characters when :attr:`text` shows only its start."""


def capped(text: str, limit: int = CELL_CHARS) -> tuple[str, int | None]:
    """The first ``limit`` characters (with an ellipsis) and the full length when cut."""
    if len(text) <= limit:
        return text, None
    return text[:limit] + ELLIPSIS, len(text)


def cell(value: Any, limit: int = CELL_CHARS) -> Cell:
    """A row's value, whatever its type, as at most ``limit`` visible characters."""
    if value is None:
        return Cell("NULL", "null")
    if isinstance(value, bool):
        return Cell("true" if value else "false", "boolean")
    if isinstance(value, int | float):
        return Cell(str(value), "number")
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        head, cut = capped(data[: limit // 2 + 1].hex(), limit)
        return Cell(f"{len(data)} bytes: {head}", "bytes", len(data) if cut else None)
    if isinstance(value, str):
        kind, raw = "text", value
    else:
        kind = "json"
        raw = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    head, cut = capped(raw, limit)
    return Cell(visible(head), kind, cut)


def summary(text: str | None, limit: int = CELL_CHARS) -> str:
    """An app's one-line text (a title, an operation's summary): capped, visible."""
    if not text:
        return ""
    head, _ = capped(text, limit)
    return visible(head)
