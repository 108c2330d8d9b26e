"""Refusals in the audit log, aggregated: a flood of 401s must not grow the table without bound.

Per minute (fixed windows of ``window`` seconds) and per *(who, status, reason, method, tool)*,
where *who* is the client IP when known, else the (tenant, user), else the OAuth client:

- the **first** refusal is written at once, as an ordinary ``refused`` row;
- the **others** of that minute are only counted, and written as **one** row when the minute is
  over, with ``detail.count`` (how many more) and ``detail.first_ts``.

So an unauthenticated flood costs at most two rows per source, reason and minute. Keys are
bounded (``max_keys`` per minute): past that, refusals from new sources are counted under the
source ``"*"``. Thread-safe: rows are added on the event loop, and taken on the audit writer's
thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

WINDOW_SECONDS: Final = 60.0
MAX_KEYS: Final = 10_000

Row = dict[str, Any]
_Key = tuple[int, str, Any, Any, Any, Any]


def _who(row: Row) -> str:
    detail = row.get("detail") or {}
    source = detail.get("source")
    if source:
        return f"ip:{source}"
    if row.get("tenant_id") or row.get("user_id"):
        return f"user:{row.get('tenant_id')}/{row.get('user_id')}"
    return f"client:{row.get('client_id') or '-'}"


class RefusalCounter:
    def __init__(
        self,
        *,
        window: float = WINDOW_SECONDS,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._window = window
        self._max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [the first row, how many more, ts of the first of those more]
        self._counts: dict[_Key, list[Any]] = {}
        self._oldest: int | None = None

    def admit(self, row: Row) -> bool:
        """True when ``row`` (a ``refused`` row) is to be written now; else it was counted."""
        now = self._clock()
        slot = int(now // self._window)
        detail = row.get("detail") or {}
        rest = (row.get("status"), detail.get("reason"), row.get("method"), row.get("tool"))
        key: _Key = (slot, _who(row), *rest)
        with self._lock:
            entry = self._counts.get(key)
            if entry is None and len(self._counts) >= self._max_keys:
                key = (slot, "*", *rest)
                entry = self._counts.get(key)
            if entry is None:
                self._counts[key] = [row, 0, None]
                if self._oldest is None:
                    self._oldest = slot
                return True
            if entry[1] == 0:
                entry[2] = now
            entry[1] += 1
            return False

    def due(self, *, everything: bool = False) -> list[Row]:
        """The count rows of the minutes that are over (of every minute with ``everything``:
        at shutdown); those minutes are forgotten."""
        slot = int(self._clock() // self._window)
        if not everything and (self._oldest is None or self._oldest >= slot):
            return []
        with self._lock:
            done = [k for k in self._counts if everything or k[0] < slot]
            entries = [self._counts.pop(k) for k in done]
            self._oldest = min((k[0] for k in self._counts), default=None)
        out: list[Row] = []
        for (_, who, *_rest), (first, more, first_ts) in zip(done, entries, strict=True):
            if more == 0:
                continue
            detail = dict(first.get("detail") or {})
            detail |= {"count": more, "first_ts": first_ts}
            if who == "*":
                detail["source"] = "*"
            out.append({**first, "ts": self._clock(), "detail": detail})
        return out

    def __len__(self) -> int:
        return len(self._counts)
