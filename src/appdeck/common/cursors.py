"""The one cursor codec of every list AppDeck pages through (MCP list methods and the list
tools): an offset, base64-encoded so that clients treat it as opaque. Each caller turns a
bad cursor into its own wire error (``-32602`` for a protocol method, ``invalid_argument`` for
a tool)."""

from __future__ import annotations

import base64
import binascii
from typing import Final

MAX_LENGTH: Final = 64
_TAGS: Final = frozenset({"o", "c"})
"""``c`` was the tools' tag before the codecs were one; cursors handed out then still work."""


class BadCursor(ValueError):
    """Not a cursor this server handed out."""


def encode(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def decode(cursor: object) -> int:
    """The offset a cursor stands for (``None``: the start)."""
    if cursor is None:
        return 0
    if not isinstance(cursor, str) or len(cursor) > MAX_LENGTH:
        raise BadCursor(cursor)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, _, num = raw.partition(":")
        offset = int(num)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor(cursor) from None
    if tag not in _TAGS or offset < 0:
        raise BadCursor(cursor)
    return offset
