"""What the deploy engine tells an observer: one seam, metrics and traces behind it.

A :class:`DeployWatcher` (given to ``DeployEngine`` by the composition root; default
:data:`NOT_WATCHED`) opens a :class:`DeployWatch` per run of a deploy, rollback or restart,
and times the wait for the app's lease (:meth:`DeployWatcher.lease`, before a run has a
number). A watch times the run's phases and is told how the run ended::

    with watcher.watch("deploy", app_id, number, strategy) as watch:   # run starts
        with watch.phase("build"): ...                                 # a phase, timed
        with watch.phase("start", instance=0): ...
        with watch.phase("shift", traffic=10): ...                     # a route change
        watch.rejected("error_rate")                                   # a canary rolled back
        watch.ended("rolled_back", "the canary answered 5xx ...")      # how it ended

A run that leaves its ``with`` block without :meth:`DeployWatch.ended` ended ``live`` when
the block finished, ``cancelled`` when it was cancelled, else ``failed`` (an exception).
An exception leaving a phase marks the phase failed, and goes on.

Everything a watch is given is bounded: kinds, phases, outcomes and reasons are the words
below; strategies are the four of :data:`appdeck.model.specs.STRATEGIES` (``none`` for a
rollback); attributes are small integers. A ``detail`` (a status message, which may quote an
app's output) is cut by the observer that keeps it.

The platform knows no observer: the metrics (``appdeck.observability.deploys``) and the
traces (``appdeck.observability.tracing``) implement these protocols, and :class:`FanOut`
gives the engine both.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Final, Literal, Protocol

Kind = Literal["deploy", "rollback", "restart"]
Phase = Literal["lease", "build", "start", "health", "shift", "analysis"]
Outcome = Literal["live", "failed", "rolled_back", "cancelled"]
Reason = Literal["error_rate", "crash_loop"]

KINDS: Final[tuple[Kind, ...]] = ("deploy", "rollback", "restart")
PHASES: Final[tuple[Phase, ...]] = ("lease", "build", "start", "health", "shift", "analysis")
OUTCOMES: Final[tuple[Outcome, ...]] = ("live", "failed", "rolled_back", "cancelled")
REASONS: Final[tuple[Reason, ...]] = ("error_rate", "crash_loop")
NO_STRATEGY: Final = "none"
"""A rollback's strategy: it switches traffic back (starting the release first if cold)."""
RESTART_STRATEGY: Final = "rolling"
"""A restart's: instance by instance behind a spare."""


def outcome_of(state: str) -> Outcome:
    """A deployment's final state as an outcome (a state a run cannot end in: ``failed``)."""
    for outcome in OUTCOMES:
        if outcome == state:
            return outcome
    return "failed"


def implied_outcome(error: BaseException | None) -> Outcome:
    """The outcome of a run that left its block without being told one: ``live`` when it
    finished, ``cancelled`` when cancelled, else ``failed``."""
    if error is None:
        return "live"
    return "cancelled" if isinstance(error, asyncio.CancelledError) else "failed"


class DeployWatch(Protocol):
    """One run of a deploy, rollback or restart, as a context manager (see the module)."""

    def __enter__(self) -> DeployWatch: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def phase(
        self, name: Phase, *, instance: int | None = None, traffic: int | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Time one phase: ``instance`` the index it starts or checks, ``traffic`` the
        percent of the app's traffic the new release gets after a shift (or analysed at)."""
        ...

    def rejected(self, reason: Reason) -> None:
        """The canary was rolled back automatically, for ``reason``."""
        ...

    def ended(self, outcome: Outcome, detail: str = "") -> None:
        """How the run ended (the first word counts); ``detail`` says why it failed."""
        ...


class DeployWatcher(Protocol):
    def watch(self, kind: Kind, app_id: int, number: int, strategy: str) -> DeployWatch:
        """A watch on one run of ``kind`` of deployment ``number`` of the app."""
        ...

    def lease(self) -> contextlib.AbstractContextManager[None]:
        """Time the taking of an app's lease (before the run it guards has a watch)."""
        ...


class _Unwatched:
    """The null watch and watcher: nothing recorded, nothing allocated per call."""

    def __enter__(self) -> _Unwatched:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def phase(
        self, name: Phase, *, instance: int | None = None, traffic: int | None = None
    ) -> contextlib.AbstractContextManager[None]:
        return _NOTHING

    def rejected(self, reason: Reason) -> None:
        return None

    def ended(self, outcome: Outcome, detail: str = "") -> None:
        return None

    def watch(self, kind: Kind, app_id: int, number: int, strategy: str) -> _Unwatched:
        return self

    def lease(self) -> contextlib.AbstractContextManager[None]:
        return _NOTHING


_NOTHING: Final = contextlib.nullcontext()
NOT_WATCHED: Final = _Unwatched()
"""Watches nothing: the engine's default, and what a rollout outside any run gets."""


class FanOut:
    """Several watchers as one: each run opens a watch on every one, in order (so the
    metrics' clocks and the tracer's spans see the same phases)."""

    def __init__(self, watchers: Sequence[DeployWatcher]) -> None:
        self._watchers = tuple(watchers)

    def watch(self, kind: Kind, app_id: int, number: int, strategy: str) -> DeployWatch:
        return _FannedWatch([w.watch(kind, app_id, number, strategy) for w in self._watchers])

    @contextlib.contextmanager
    def lease(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for watcher in self._watchers:
                stack.enter_context(watcher.lease())
            yield


class _FannedWatch:
    def __init__(self, watches: list[DeployWatch]) -> None:
        self._watches = watches
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> _FannedWatch:
        for watch in self._watches:
            self._stack.enter_context(watch)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stack.__exit__(kind, error, traceback)

    @contextlib.contextmanager
    def phase(
        self, name: Phase, *, instance: int | None = None, traffic: int | None = None
    ) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for watch in self._watches:
                stack.enter_context(watch.phase(name, instance=instance, traffic=traffic))
            yield

    def rejected(self, reason: Reason) -> None:
        for watch in self._watches:
            watch.rejected(reason)

    def ended(self, outcome: Outcome, detail: str = "") -> None:
        for watch in self._watches:
            watch.ended(outcome, detail)
