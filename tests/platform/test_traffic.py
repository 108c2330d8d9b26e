"""TrafficRing: the last minutes of a route's traffic from counters that only grow."""

from __future__ import annotations

from appdeck.ingress.routes import Counters
from appdeck.platform.traffic import TrafficRing


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_before_any_sample_the_window_is_everything_since_the_ring_began() -> None:
    counters, clock = Counters(), Clock()
    ring = TrafficRing(counters, clock=clock)
    counters.record("a--t", "1-1", 200, 0.1)
    counters.record("a--t", "1-1", 502, 0.3, upstream_error=True)
    clock.now += 12
    traffic = ring.window("a--t")
    assert (traffic.window_s, traffic.requests, traffic.errors_5xx) == (12, 2, 1)
    assert traffic.mean_latency_ms == 200.0


def test_the_window_covers_about_five_minutes_and_forgets_older_traffic() -> None:
    counters, clock = Counters(), Clock()
    ring = TrafficRing(counters, clock=clock, every_s=30, window_s=300)
    for _ in range(100):  # long ago
        counters.record("a--t", "1-1", 500, 0.01)
    for _ in range(12):  # a sample every 30 s for 6 minutes
        ring.sample()
        clock.now += 30
    counters.record("a--t", "1-2", 200, 0.05)  # a new release: counted with the route
    traffic = ring.window("a--t")
    assert traffic.requests == 1
    assert traffic.errors_5xx == 0
    assert 270 <= traffic.window_s <= 300


def test_samples_closer_than_the_interval_are_not_taken_and_quiet_routes_show_nothing() -> None:
    counters, clock = Counters(), Clock()
    ring = TrafficRing(counters, clock=clock, every_s=30)
    ring.sample()
    counters.record("a--t", "1-1", 200, 0.01)
    clock.now += 5
    ring.sample()  # too soon: the first sample stays the baseline
    assert ring.window("a--t").requests == 1
    quiet = ring.window("b--t")
    assert (quiet.requests, quiet.mean_latency_ms) == (0, None)


def test_counters_totals_sum_every_release_of_a_route_in_one_pass() -> None:
    counters = Counters()
    counters.record("a--t", "1-1", 200, 0.5)
    counters.record("a--t", "1-2", 404, 0.25)
    counters.record("b--t", "2-1", 504, 1.0, upstream_error=True)
    totals = counters.totals()
    assert totals["a--t"].by_class[1:] == [0, 1, 0, 1, 0]
    assert totals["a--t"].latency_sum == 0.75
    assert (totals["b--t"].status_5xx, totals["b--t"].upstream_errors) == (1, 1)
