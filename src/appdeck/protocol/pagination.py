"""Paging of the MCP list methods (the codec is :mod:`appdeck.common.cursors`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from appdeck.common import cursors
from appdeck.protocol.errors import InvalidParams

T = TypeVar("T")

PAGE_SIZE = 100


def encode(offset: int) -> str:
    return cursors.encode(offset)


def decode(cursor: object) -> int:
    """The offset a cursor stands for; -32602 for anything we did not hand out."""
    try:
        return cursors.decode(cursor)
    except cursors.BadCursor:
        raise InvalidParams("Invalid cursor") from None


def page(
    items: Sequence[T], params: dict[str, Any], size: int = PAGE_SIZE
) -> tuple[list[T], str | None]:
    """One page of ``items`` from ``params.cursor``, and the next cursor (None at the end)."""
    start = decode(params.get("cursor"))
    chunk = list(items[start : start + size])
    nxt = encode(start + size) if start + size < len(items) else None
    return chunk, nxt
