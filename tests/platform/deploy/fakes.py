"""A runtime and a router that keep everything in memory: the engine's logic under test,
without processes (the real drivers have their own tests; the e2e suite runs them together).

The router also feeds a real ingress route table (``FakeRouter.ingress``), so a test can ask
what a hostname serves (:meth:`FakeRouter.serves`) the way the ingress would answer it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from appdeck.common.errors import Conflict
from appdeck.ingress import STOPPED, Counters, RouteTable
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.platform.deploy.ports import (
    Backend,
    BuildFailed,
    DiskUsage,
    Instance,
    InstanceEvent,
    InstanceEventKind,
    InstanceStatus,
    InstanceWatcher,
    Release,
)


@dataclass
class FakeRuntime:
    running_: dict[str, dict[int, Instance]] = field(default_factory=dict)
    prepared: list[str] = field(default_factory=list)
    ports: itertools.count[int] = field(default_factory=lambda: itertools.count(20000))
    adoptable: dict[str, dict[int, Instance]] = field(default_factory=dict)
    health_plan: list[bool] = field(default_factory=list)
    """The health checks of the next instances started, in order (then: healthy)."""
    statuses: dict[str, list[InstanceStatus]] = field(default_factory=dict)
    """What :meth:`inspect` says of a release (default: its running instances, running)."""
    disks: dict[int, DiskUsage] = field(default_factory=dict)
    watchers: list[InstanceWatcher] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    """What the engine asked, in words that outlive a renaming of the port's methods (the
    pinned sequences of test_engine_sequences.py); polls (crash loops) are left out."""

    async def prepare(self, release: Release) -> None:
        self.calls.append(f"prepare {release.release_id}")
        self.prepared.append(release.release_id)
        if release.spec.build_command == "false":
            raise BuildFailed("the build command exited with status 1")

    async def start(self, release: Release, index: int) -> Instance:
        if index in self.running_.get(release.release_id, {}):  # as the real driver says
            raise Conflict(f"instance {index} of release {release.release_id} is already running")
        instance = Instance(release.release_id, index, f"127.0.0.1:{next(self.ports)}")
        self.calls.append(f"start {release.release_id}#{index} {instance.upstream}")
        self.running_.setdefault(release.release_id, {})[index] = instance
        return instance

    async def wait_healthy(self, release: Release, instance: Instance, within_s: float) -> bool:
        self.calls.append(f"ready? {instance.release_id}#{instance.index}")
        if self.health_plan:
            return self.health_plan.pop(0)
        return release.env.get("UNHEALTHY") != "1"

    async def why_unhealthy(self, release: Release, instance: Instance) -> str:
        return f"GET {release.spec.health_check.path} answered 503"

    async def stop(self, release_id: str, index: int | None = None) -> None:
        self.calls.append(f"stop {release_id}" + ("" if index is None else f"#{index}"))
        if index is None:
            self.running_.pop(release_id, None)
        else:
            self.running_.get(release_id, {}).pop(index, None)

    async def running(self, release_id: str) -> list[Instance]:
        self.calls.append(f"running {release_id}")
        return [i for _, i in sorted(self.running_.get(release_id, {}).items())]

    async def adopt(self, release: Release) -> list[Instance]:
        self.calls.append(f"recover {release.release_id}")
        found = self.adoptable.pop(release.release_id, {})
        self.running_.setdefault(release.release_id, {}).update(found)
        return list(found.values())

    async def crash_looping(self, release_id: str) -> bool:
        return False

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        if release_id in self.statuses:
            return self.statuses[release_id]
        running = self.running_.get(release_id, {})
        return [InstanceStatus(index, "running") for index in sorted(running)]

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        return self.disks.get(app_id)

    def watch(self, watcher: InstanceWatcher) -> None:
        self.watchers.append(watcher)

    def crash(
        self, app_id: int, release_id: str, index: int, kind: InstanceEventKind = "crashed"
    ) -> None:
        """Tell the watchers an instance crashed (as the real runtime's supervision does)."""
        event = InstanceEvent(app_id, release_id, index, kind)
        for watcher in self.watchers:
            watcher(event)


@dataclass
class FakeRouter:
    table: dict[str, list[Backend]] = field(default_factory=dict)
    history: list[dict[str, int]] = field(default_factory=list)
    error_rates: dict[str, float] = field(default_factory=dict)
    ingress: IngressRouter = field(default_factory=lambda: IngressRouter(RouteTable(), Counters()))
    calls: list[str] = field(default_factory=list)
    """Route changes and marks, in words (share the runtime's list to see one sequence)."""

    def route(self, route: str, backends: list[Backend]) -> None:
        stopped = [b.release_id for b in backends] == [STOPPED]  # a stopped app: 503 "stopped"
        assert stopped or sum(b.weight for b in backends) == 100
        assert all(b.upstreams for b in backends if b.weight), backends
        assert "--" in route, f"{route!r} is a bare name, not an app's route key"
        self.table[route] = backends
        said = " ".join(f"{b.release_id}={b.weight}{list(b.upstreams)}" for b in backends)
        self.calls.append(f"route {route} {said}")
        self.history.append({b.release_id: b.weight for b in backends})
        self.ingress.route(route, backends)

    def unroute(self, route: str) -> None:
        assert "--" in route, f"{route!r} is a bare name, not an app's route key"
        self.table.pop(route, None)
        self.calls.append(f"unroute {route}")
        self.history.append({})
        self.ingress.unroute(route)

    def mark(self, route: str, release_id: str) -> None:
        self.calls.append(f"mark {route} {release_id}")

    def window(self, route: str, release_id: str) -> tuple[int, int]:
        rate = self.error_rates.get(release_id, 0.0)
        return 100, int(rate * 100)

    def weights(self, route: str) -> dict[str, int]:
        return {b.release_id: b.weight for b in self.table.get(route, [])}

    def serves(self, host: str) -> str | None:
        """The release the ingress would send a request for ``host`` to (a 100 % route)."""
        resolved = self.ingress.table.resolve(host.encode())
        return None if resolved is None else resolved.backend.release_id
