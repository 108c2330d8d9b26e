"""Opaque cursors for list methods: an offset, base64-encoded so clients do not parse it."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, TypeVar

from appdeck.protocol.errors import InvalidParams

T = TypeVar("T")

PAGE_SIZE = 100


def encode(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def decode(cursor: object) -> int:
    """The offset a cursor stands for; -32602 for anything we did not hand out."""
    if cursor is None:
        return 0
    if not isinstance(cursor, str) or len(cursor) > 64:
        raise InvalidParams("Invalid cursor")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, _, num = raw.partition(":")
        offset = int(num)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidParams("Invalid cursor") from None
    if tag != "o" or offset < 0:
        raise InvalidParams("Invalid cursor")
    return offset


def page(
    items: Sequence[T], params: dict[str, Any], size: int = PAGE_SIZE
) -> tuple[list[T], str | None]:
    """One page of ``items`` from ``params.cursor``, and the next cursor (None at the end)."""
    start = decode(params.get("cursor"))
    chunk = list(items[start : start + size])
    nxt = encode(start + size) if start + size < len(items) else None
    return chunk, nxt
