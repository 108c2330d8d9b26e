"""Histograms and counters kept in plain Python and turned into metric families when scraped.

prometheus-client's ``inc`` and ``observe`` take a lock each (0.5-0.7 µs here, bench/RESULTS.md):
on a hot path (a tools/call, a database statement, a Redis command) a few list and dict
operations on the event loop's thread cost less. The scrape runs on that thread too, so no
lock is needed; a count made from another thread may, rarely, be lost, never corrupted.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily


class Latency:
    """One histogram's state: a count per bucket (not cumulative), the count and the sum."""

    __slots__ = ("bounds", "buckets", "count", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.buckets = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.count = 0
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        names = [*(repr(b) for b in self.bounds), "+Inf"]  # as prometheus-client writes them
        return list(zip(names, itertools.accumulate(self.buckets), strict=True))


def histogram(
    name: str, documentation: str, labels: Sequence[str], states: Mapping[Any, Latency]
) -> HistogramMetricFamily:
    """A histogram family from ``states``, keyed by label values (a tuple, or one string)."""
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    for values, state in list(states.items()):  # a copy, should a scrape ever run off the loop
        family.add_metric(_values(values), state.cumulative(), state.total)
    return family


def counter(
    name: str, documentation: str, labels: Sequence[str], counts: Mapping[Any, float]
) -> CounterMetricFamily:
    """A counter family (``name`` without ``_total``) from counts keyed by label values."""
    family = CounterMetricFamily(name, documentation, labels=list(labels))
    for values, n in list(counts.items()):
        family.add_metric(_values(values), n)
    return family


def gauge(
    name: str, documentation: str, labels: Sequence[str], values: Mapping[Any, float]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for key, n in list(values.items()):
        family.add_metric(_values(key), n)
    return family


def _values(key: Any) -> list[str]:
    if isinstance(key, tuple):
        return list(key)
    return [] if key is None else [key]
