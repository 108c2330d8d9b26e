"""What each app's route answered over the last few minutes, from the data plane's counters.

The counters (:class:`~appdeck.ingress.routes.Counters`, or HAProxy's
:class:`~appdeck.ingress.haproxy.plane.HAProxyCounters` behind the same interface) only
grow: "the last 5 minutes" is the difference from a sample taken about 5 minutes ago. The
ring keeps one sample of every route's totals every ``every_s`` for ``window_s`` (11 samples
of a few numbers per route by default), taken in one pass over the counters.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from appdeck.ingress.routes import Counters, RouteTotals

SAMPLE_EVERY_S: Final = 30.0
WINDOW_S: Final = 300.0

Totals = tuple[int, int, float]
"""(requests, 5xx answers, seconds to response headers summed)."""


@dataclass(frozen=True, slots=True)
class Traffic:
    """What a route answered over ``window_s`` seconds (the span actually measured: shorter
    while the ring fills up)."""

    window_s: float
    requests: int
    errors_5xx: int
    mean_latency_ms: float | None
    """None: no request in the window."""

    def public(self) -> dict[str, object]:
        return {
            "window_s": round(self.window_s, 1),
            "requests": self.requests,
            "errors_5xx": self.errors_5xx,
            "mean_latency_ms": self.mean_latency_ms,
        }


def _totals(found: RouteTotals | None) -> Totals:
    if found is None:
        return (0, 0, 0.0)
    return (found.requests, found.status_5xx, found.latency_sum)


class TrafficRing:
    def __init__(
        self,
        counters: Counters,
        *,
        every_s: float = SAMPLE_EVERY_S,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._counters = counters
        self._every_s = every_s
        self._window_s = window_s
        self._clock = clock
        self._samples: deque[tuple[float, dict[str, Totals]]] = deque()
        self._born = clock()

    def sample(self) -> None:
        """Take a sample of every route, unless the last one is younger than ``every_s``;
        drop the samples older than the window needs."""
        now = self._clock()
        if self._samples and now - self._samples[-1][0] < self._every_s:
            return
        taken = {route: _totals(t) for route, t in self._counters.totals().items()}
        self._samples.append((now, taken))
        while len(self._samples) > 1 and now - self._samples[1][0] >= self._window_s:
            self._samples.popleft()

    def window(self, route: str) -> Traffic:
        """``route``'s traffic since the oldest sample within the window (since the ring
        began, before its first sample)."""
        now = self._clock()
        base_at, base = self._born, (0, 0, 0.0)
        for at, taken in self._samples:
            if now - at <= self._window_s:
                base_at, base = at, taken.get(route, (0, 0, 0.0))
                break
        current = self._current(route)
        requests = max(0, current[0] - base[0])
        errors = max(0, current[1] - base[1])
        latency = max(0.0, current[2] - base[2])
        mean = round(latency / requests * 1000, 2) if requests else None
        return Traffic(now - base_at, requests, errors, mean)

    def _current(self, route: str) -> Totals:
        total = RouteTotals()
        for _, cell in self._counters.cells(route):
            total.add(cell)
        return _totals(total)
