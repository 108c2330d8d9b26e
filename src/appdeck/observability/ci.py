"""The CI series: runs by outcome and how long they took.

    appdeck_ci_runs_total{outcome}     runs this replica ended: passed, failed, timed_out,
                                       error, cancelled
    appdeck_ci_run_seconds             a run from its start (its turn came) to its end; the
                                       time queued behind the app's other runs is not in it

A run is a few per push at most: prometheus-client's own (locking) metrics cost nothing
here.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

OUTCOMES: Final = ("passed", "failed", "timed_out", "error", "cancelled")
"""A run's ends (``appdeck.platform.ci.service.ENDED``); anything else counts as ``error``."""

RUNS: Final = Counter("appdeck_ci_runs", "CI runs ended on this replica, by outcome", ["outcome"])
RUN_SECONDS: Final = Histogram(
    "appdeck_ci_run_seconds",
    "CI runs from their start to their end (checkout, install, tests), any outcome",
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 3600),
)
for _outcome in OUTCOMES:  # every series exists at 0 from the start: rate() needs it
    RUNS.labels(_outcome)


def run_ended(outcome: str, seconds: float) -> None:
    """A CI run ended with ``outcome`` after ``seconds``."""
    RUNS.labels(outcome if outcome in OUTCOMES else "error").inc()
    RUN_SECONDS.observe(seconds)
