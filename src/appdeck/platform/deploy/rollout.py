"""The four strategies. Each moves traffic from the live release (if any) to a new one and
never takes the live version down: on any failure the old release keeps (or gets back) all
traffic and the new one is stopped.

- recreate: stop the old release, start the new one (a short gap is the point of it).
- rolling: start new instances one by one behind health checks, retiring an old one each time.
- blue_green: start the whole new set, switch all traffic at once, keep the old set warm.

recreate, blue_green and canary start their whole new set before any of it gets traffic, so
its instances start side by side (:meth:`Rollout.start_set`: every start, then every health
check, in index order); rolling starts one at a time, each behind its health check.
- canary: give the new set a share of traffic in steps, watch its error rate and health over
  an analysis window at each step, promote or roll back automatically.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from appdeck.platform.deploy.ports import (
    Backend,
    BuildFailed,
    Driver,
    Instance,
    Release,
    RouterPort,
)
from appdeck.platform.deploy.watch import NOT_WATCHED, DeployWatch, Reason

Report = Callable[[str, int | None], Awaitable[None]]
"""Announce a step: a message, and the percent of traffic the new release now gets."""

START_WITHIN_S = 30.0


class RolloutFailed(Exception):
    """The new release did not become healthy; traffic is back on the old one."""


class CanaryRejected(Exception):
    """The canary's error rate or health failed its analysis; the old release kept traffic.
    ``reason``: ``error_rate`` (too many 5xx) or ``crash_loop`` (its instances kept dying)."""

    def __init__(self, message: str, reason: Reason) -> None:
        super().__init__(message)
        self.reason: Reason = reason


@dataclass
class Rollout:
    runtime: Driver
    router: RouterPort
    new: Release
    old: Release | None
    old_instances: list[Instance]
    report: Report
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    started: list[Instance] = field(default_factory=list)
    watch: DeployWatch = NOT_WATCHED
    """Times each start, health check, route change and analysis window (:mod:`.watch`)."""

    @property
    def name(self) -> str:
        """The route key traffic moves on (the app's, never its bare name)."""
        return self.new.route

    def _backend(self, release: Release, weight: int, instances: list[Instance]) -> Backend:
        return Backend(release.release_id, weight, tuple(i.upstream for i in instances))

    def shift(self, backends: list[Backend]) -> None:
        """Route the app to ``backends`` (none: unrouted), as one watched route change."""
        traffic = next((b.weight for b in backends if b.release_id == self.new.release_id), 0)
        with self.watch.phase("shift", traffic=traffic):
            if backends:
                self.router.route(self.name, backends)
            else:
                self.router.unroute(self.name)

    def route_to_new(self) -> None:
        self.shift([self._backend(self.new, 100, self.started)])

    def route_back(self) -> None:
        if self.old is not None and self.old_instances:
            self.shift([self._backend(self.old, 100, self.old_instances)])
        else:
            self.shift([])

    async def start_one(self, index: int) -> Instance:
        """Start instance ``index`` and wait for its health check to pass."""
        instance = await self.launch(index)
        await self.ready(instance)
        return instance

    async def start_set(self, message: Callable[[int], str], traffic: int | None) -> None:
        """Start every instance of the new set (each announced by ``message(index)`` before it
        starts), then wait for their health checks in index order: the instances start up
        side by side, so the set is ready about when its slowest one is, not after the sum
        of their starts. Nothing is routed to any of them here; on a failed check the caller
        aborts as before (the whole new release stops), the first failing index named."""
        for index in range(self.instances()):
            await self.report(message(index), traffic)
            await self.launch(index)
        for instance in list(self.started):
            await self.ready(instance)

    async def launch(self, index: int) -> Instance:
        """Start instance ``index`` (not yet checked: see :meth:`ready`)."""
        with self.watch.phase("start", instance=index):
            instance = await self.runtime.start(self.new, index)
        self.started.append(instance)
        return instance

    async def ready(self, instance: Instance) -> None:
        """Wait for ``instance``'s health check to pass; :class:`RolloutFailed` if it does not."""
        index = instance.index
        timeout = self.new.spec.health_check.timeout_s
        with self.watch.phase("health", instance=index):
            within = max(START_WITHIN_S, timeout)
            ready = await self.runtime.wait_ready(self.new, instance, within)
            if not ready.ok:
                raise RolloutFailed(
                    f"instance {index} of the new release did not pass its health check "
                    f"({self.new.spec.health_check.path}): {ready.why}"
                )

    async def abort(self) -> None:
        """Give traffic back to the old release and stop what we started."""
        self.route_back()
        await self.runtime.stop(self.new.release_id)

    def instances(self) -> int:
        return self.new.spec.instances

    @property
    def by_index(self) -> bool:
        """The driver stops one instance of a release (``indexed_instances``); else the old
        release is retired as a whole, once the new one has all its traffic."""
        return self.runtime.capabilities().indexed_instances


async def recreate(r: Rollout) -> None:
    if r.old is not None:
        await r.report("Stopping the old release (recreate)", 0)
        r.shift([])
        await r.runtime.stop(r.old.release_id)
        r.old_instances = []
    await r.start_set(lambda index: f"Starting instance {index + 1} of {r.instances()}", None)
    r.route_to_new()
    await r.report("All traffic on the new release", 100)


async def rolling(r: Rollout) -> None:
    remaining = list(r.old_instances)
    total = r.instances()
    for index in range(total):
        await r.report(f"Starting instance {index + 1} of {total}", None)
        await r.start_one(index)
        retiring = remaining.pop(0) if remaining and index < total - 1 else None
        backends = [r._backend(r.new, 100, r.started)]
        if r.old is not None and remaining:
            share = round(100 * len(r.started) / (len(r.started) + len(remaining)))
            backends = [
                r._backend(r.new, share, r.started),
                r._backend(r.old, 100 - share, remaining),
            ]
        r.shift(backends)
        await r.report(f"Instance {index + 1} of {total} serves traffic", backends[0].weight)
        if retiring is not None and r.old is not None and r.by_index:
            await r.runtime.stop(r.old.release_id, retiring.index)
    r.route_to_new()
    if r.old is not None:
        await r.runtime.stop(r.old.release_id)
        r.old_instances = []
    await r.report("All traffic on the new release", 100)


async def blue_green(r: Rollout) -> None:
    await r.start_set(lambda index: f"Starting green instance {index + 1} of {r.instances()}", 0)
    r.route_to_new()  # one atomic switch
    await r.report("Switched all traffic to the new release; the old one stays warm", 100)


async def canary(
    r: Rollout,
    *,
    steps: list[int],
    window_s: float,
    max_error_rate: float,
    enter: Callable[[], Awaitable[None]] | None = None,
) -> None:
    await r.start_set(lambda index: f"Starting canary instance {index + 1} of {r.instances()}", 0)
    if r.old is None or not r.old_instances:
        r.route_to_new()
        await r.report("No live release to compare with: all traffic on the new release", 100)
        return
    if enter is not None:
        await enter()
    for percent in [p for p in steps if p < 100]:
        r.shift(
            [
                r._backend(r.new, percent, r.started),
                r._backend(r.old, 100 - percent, r.old_instances),
            ]
        )
        r.router.mark(r.name, r.new.release_id)
        await r.report(f"Canary at {percent}% for {window_s:g}s", percent)
        with r.watch.phase("analysis", traffic=percent):
            requests, errors = await _analyse(r, window_s, max_error_rate, percent)
        rate = f"{errors / requests:.0%}" if requests else "no requests"
        await r.report(
            f"Canary at {percent}% passed: {errors} of {requests} requests answered 5xx "
            f"({rate}; limit {max_error_rate:.0%})",
            percent,
        )
    r.route_to_new()
    await r.report("Canary promoted: all traffic on the new release", 100)


async def _analyse(
    r: Rollout, window_s: float, max_error_rate: float, percent: int
) -> tuple[int, int]:
    """Watch the canary for ``window_s``: (requests, 5xx) it answered, or CanaryRejected."""
    deadline = time.monotonic() + window_s
    while True:
        if await r.runtime.gave_up(r.new.release_id):
            raise CanaryRejected(f"the canary crashed repeatedly at {percent}%", "crash_loop")
        requests, errors = r.router.window(r.name, r.new.release_id)
        if requests >= 10 and errors / requests > max_error_rate:
            raise CanaryRejected(
                f"the canary answered {errors} of {requests} requests with 5xx "
                f"({errors / requests:.0%} > {max_error_rate:.0%}) at {percent}%",
                "error_rate",
            )
        if time.monotonic() >= deadline:
            break
        await r.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
    requests, errors = r.router.window(r.name, r.new.release_id)
    if requests and errors / requests > max_error_rate:
        raise CanaryRejected(
            f"the canary's error rate was {errors / requests:.0%} "
            f"(> {max_error_rate:.0%}) at {percent}%",
            "error_rate",
        )
    return requests, errors


__all__ = [
    "BuildFailed",
    "CanaryRejected",
    "Rollout",
    "RolloutFailed",
    "blue_green",
    "canary",
    "recreate",
    "rolling",
]
