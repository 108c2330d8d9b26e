"""Results sized for a model: a JSON value cut, step by step, to at most so many characters,
never into broken JSON, with a note of what was cut."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from appdeck.platform.apis.refs import (
    Json,
)

# -- sized for a model ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fitted:
    value: dict[str, Any]
    truncated: bool
    chars: int
    """The JSON length of the whole value, before any cut."""
    note: str | None


_STEPS: Final = (
    # (depth, entries per object or list, characters per string); None: no limit
    (None, None, 2000),
    (None, None, 500),
    (None, 200, 300),
    (12, 100, 200),
    (10, 50, 200),
    (8, 40, 160),
    (6, 30, 120),
    (5, 20, 100),
    (4, 20, 80),
    (3, 15, 80),
    (2, 10, 60),
    (1, 10, 40),
    (1, 5, 40),
)


def size(value: Json) -> int:
    """Characters of ``value`` as JSON, as the text content carries it."""
    return len(json.dumps(value))


def fit(value: dict[str, Any], max_chars: int, *, smaller: str) -> Fitted:
    """``value`` whole when its JSON fits in ``max_chars``; else a copy cut until it fits
    (always a complete JSON object): long strings shortened, long lists and objects keep their
    first entries, deep parts replaced by a one-line marker. ``smaller`` says how to ask for
    less (in the note)."""
    whole = size(value)
    if whole <= max_chars:
        return Fitted(value, False, whole, None)
    for depth, entries, chars in _STEPS:
        cut = _cut(value, depth, entries, chars, 0)
        if size(cut) <= max_chars:
            limits = [f"strings over {chars} characters shortened"]
            if entries is not None:
                limits.append(f"lists and objects cut after {entries} entries")
            if depth is not None:
                limits.append(f"parts deeper than {depth} levels replaced by a marker")
            note = (
                f"Truncated: the whole is {whole} characters, over max_chars {max_chars}; "
                f"{', '.join(limits)} (marked with …). {smaller}"
            )
            return Fitted(cut, True, whole, note)
    note = f"Truncated: the whole is {whole} characters, far over max_chars {max_chars}. {smaller}"
    return Fitted({"…": "too large to show at this max_chars"}, True, whole, note)


def _cut(value: Json, depth: int | None, entries: int | None, chars: int, level: int) -> Json:
    if isinstance(value, str):
        return value if len(value) <= chars else f"{value[:chars]}…({len(value) - chars} more)"
    if not isinstance(value, dict | list):
        return value
    if depth is not None and level >= depth and value:
        kind = "object" if isinstance(value, dict) else "list"
        return f"…({kind} of {len(value)} entries cut)"
    if isinstance(value, list):
        kept = value if entries is None else value[:entries]
        out = [_cut(v, depth, entries, chars, level + 1) for v in kept]
        if len(kept) < len(value):
            out.append(f"…({len(value) - len(kept)} more entries)")
        return out
    keys = list(value)
    kept_keys = keys if entries is None else keys[:entries]
    cut = {
        _cut(k, None, None, chars, 0): _cut(value[k], depth, entries, chars, level + 1)
        for k in kept_keys
    }
    if len(kept_keys) < len(keys):
        cut["…"] = f"{len(keys) - len(kept_keys)} more entries"
    return cut
