"""The deploy engine's series: runs started and finished, their durations, phases, canary
rollbacks.

    appdeck_deploys_started_total{kind,strategy}             a deploy, rollback or restart began
    appdeck_deploys_finished_total{kind,strategy,outcome}    ... and ended: live, failed,
                                                             rolled_back, cancelled
    appdeck_deploy_seconds{kind,strategy,outcome}            histogram: the whole run
    appdeck_deploy_phase_seconds{phase}                      histogram: lease, build, start,
                                                             health, shift, analysis
    appdeck_canary_rollbacks_total{reason}                   error_rate, crash_loop

:class:`DeployMetrics` is the engine's :class:`~appdeck.platform.deploy.watch.DeployWatcher`.
Every label is one of a few words (:mod:`appdeck.platform.deploy.watch`): no app, tenant or
release is a label. ``kind`` x ``strategy`` pairs are fixed: a deploy runs one of the four
strategies, a rollback has ``none``, a restart is ``rolling``; every series exists at 0 from
the start (``rate()`` needs it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Final

from prometheus_client import Counter, Histogram

from appdeck.model.specs import STRATEGIES
from appdeck.platform.deploy.watch import (
    NO_STRATEGY,
    OUTCOMES,
    PHASES,
    REASONS,
    RESTART_STRATEGY,
    Kind,
    Outcome,
    Phase,
    Reason,
    implied_outcome,
)

OTHER: Final = "other"
PHASE_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
"""Up to ten minutes: a build may take that long (a phase longer than that lands in +Inf)."""
RUN_BUCKETS: Final = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800)

PAIRS: Final[tuple[tuple[Kind, str], ...]] = (
    *(("deploy", strategy) for strategy in STRATEGIES),
    ("rollback", NO_STRATEGY),
    ("restart", RESTART_STRATEGY),
)
"""Every (kind, strategy) a run can have."""

STARTED: Final = Counter(
    "appdeck_deploys_started",
    "Deploys, rollbacks and restarts begun (under the app's lease), by kind and strategy",
    ["kind", "strategy"],
)
FINISHED: Final = Counter(
    "appdeck_deploys_finished",
    "Deploys, rollbacks and restarts ended, by kind, strategy and outcome",
    ["kind", "strategy", "outcome"],
)
SECONDS: Final = Histogram(
    "appdeck_deploy_seconds",
    "How long a deploy, rollback or restart ran, from its start to its outcome",
    ["kind", "strategy", "outcome"],
    buckets=RUN_BUCKETS,
)
PHASE_SECONDS: Final = Histogram(
    "appdeck_deploy_phase_seconds",
    "How long each phase of a run took: lease (waiting for the app's lease), build, start "
    "(one instance), health (one instance's check), shift (one route change), analysis (one "
    "canary window)",
    ["phase"],
    buckets=PHASE_BUCKETS,
)
CANARY_ROLLBACKS: Final = Counter(
    "appdeck_canary_rollbacks",
    "Canaries rolled back automatically, by reason (error_rate, crash_loop)",
    ["reason"],
)

for _kind, _strategy in PAIRS:
    STARTED.labels(_kind, _strategy)
    for _outcome in OUTCOMES:
        FINISHED.labels(_kind, _strategy, _outcome)
        SECONDS.labels(_kind, _strategy, _outcome)
for _phase in PHASES:
    PHASE_SECONDS.labels(_phase)
for _reason in REASONS:
    CANARY_ROLLBACKS.labels(_reason)


class DeployMetrics:
    """Counts and times every run (see the module)."""

    def watch(self, kind: Kind, app_id: int, number: int, strategy: str) -> _Run:
        return _Run(kind, strategy if (kind, strategy) in PAIRS else OTHER)

    @contextlib.contextmanager
    def lease(self) -> Iterator[None]:
        with _timed("lease"):
            yield


@contextlib.contextmanager
def _timed(phase: Phase) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        PHASE_SECONDS.labels(phase).observe(time.perf_counter() - started)


class _Run:
    def __init__(self, kind: Kind, strategy: str) -> None:
        self._kind = kind
        self._strategy = strategy
        self._outcome: Outcome | None = None
        self._started = 0.0

    def __enter__(self) -> _Run:
        STARTED.labels(self._kind, self._strategy).inc()
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        outcome = self._outcome or implied_outcome(error)
        FINISHED.labels(self._kind, self._strategy, outcome).inc()
        seconds = time.perf_counter() - self._started
        SECONDS.labels(self._kind, self._strategy, outcome).observe(seconds)

    def phase(
        self, name: Phase, *, instance: int | None = None, traffic: int | None = None
    ) -> contextlib.AbstractContextManager[None]:
        return _timed(name)

    def rejected(self, reason: Reason) -> None:
        CANARY_ROLLBACKS.labels(reason).inc()

    def ended(self, outcome: Outcome, detail: str = "") -> None:
        if self._outcome is None:
            self._outcome = outcome
