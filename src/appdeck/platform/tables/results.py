"""Rows out of an app's tables, within one result's size.

A page of rows (or search hits) stops early at :data:`RESULT_BYTES` of JSON, with a cursor to
go on; a single row larger than that on its own (100 columns of 1 MiB each is a 100 MiB row)
has its largest values replaced by a marker naming the row, the field and the value's full
size, until it fits. Rows are read from a streamed result and the stream is left as soon as
the page is full, so the platform never holds more than the page and one row besides.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

T = TypeVar("T")

RESULT_BYTES: Final = 4 * 1024 * 1024
"""The rows of one result at most (UTF-8 JSON): a page stops early, a lone row is cut."""


def size_of(value: Any) -> int:
    """The value's size as UTF-8 JSON."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def cut_marker(row: Any, name: str, size: int) -> str:
    where = f"row id {row}" if isinstance(row, int) else "this row"
    return (
        f"[cut: {where}, field {name}: {size} bytes of JSON, more than one result holds; "
        f"read it alone with records get and columns [{name}]]"
    )


def fit(row: dict[str, Any], budget: int = RESULT_BYTES) -> dict[str, Any]:
    """``row`` itself when its JSON fits ``budget``, else a copy with its largest values
    replaced by :func:`cut_marker` until it does."""
    total = size_of(row)
    if total <= budget:
        return row
    out = dict(row)
    sizes = sorted(((size_of(v), k) for k, v in row.items()), reverse=True)
    for size, key in sizes:
        if total <= budget:
            break
        mark = cut_marker(row.get("id"), key, size)
        out[key] = mark
        total -= size - size_of(mark)
    return out


@dataclass
class Page(Generic[T]):
    items: list[T] = field(default_factory=list)
    capped: bool = False
    """Stopped before ``limit`` items because of :data:`RESULT_BYTES`."""
    more: bool = False
    """There are items after these (a cursor is due)."""


async def read_page(
    conn: AsyncConnection,
    stmt: sa.Select[Any],
    limit: int,
    make: Callable[[Any], T],
    size: Callable[[T], int],
) -> Page[T]:
    """Up to ``limit`` items made from the rows of ``stmt`` (which asks for one more), within
    :data:`RESULT_BYTES` by ``size``; the first item is always kept (``make`` fits it)."""
    page: Page[T] = Page()
    total = 0
    result = await conn.stream(stmt)
    try:
        async for raw in result:
            if len(page.items) == limit:
                page.more = True
                break
            item = make(raw)
            total += size(item)
            if page.items and total > RESULT_BYTES:
                page.capped = page.more = True
                break
            page.items.append(item)
    finally:
        await result.close()
    return page
