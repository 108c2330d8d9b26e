"""Per-token rate limits: a token bucket per bearer token, kept in memory (bounded)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

MAX_BUCKETS: Final = 50_000


class RateLimiter:
    """``rate`` tokens per second, up to ``burst``; ``rate == 0`` means no limit."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._clock = clock
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()

    def check(self, key: str) -> int | None:
        """Take one token for ``key``: None when allowed, else milliseconds to wait."""
        if self.rate <= 0:
            return None
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = [self.burst, now]
            if len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
        tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return None
        bucket[0] = tokens
        return max(1, int((1.0 - tokens) / self.rate * 1000))
