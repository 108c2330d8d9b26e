"""Numbers from URLs: offsets and numbers a person (or an attacker) typed.

``str.isdigit`` is true of ``①`` and ``²``, which ``int`` refuses: a number is ASCII digits
here, and an offset out of range is clamped, so no query value is ever a 500.
"""

from __future__ import annotations

from typing import Final

from starlette.requests import Request

MAX_OFFSET: Final = 1_000_000


def number(raw: str, max_digits: int = 18) -> int | None:
    """``raw`` as a non-negative int when it is 1 to ``max_digits`` ASCII digits, else None."""
    if 0 < len(raw) <= max_digits and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


def offset(request: Request, name: str = "offset") -> int:
    """The query's ``name`` as an offset: 0 unless it is a number, at most :data:`MAX_OFFSET`."""
    found = number(request.query_params.get(name, ""), 7)
    return min(found, MAX_OFFSET) if found is not None else 0
