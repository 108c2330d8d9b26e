"""A runtime driver and a router that keep everything in memory: the engine's logic under test,
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
    Adoption,
    Backend,
    BuildFailed,
    Capabilities,
    DiskUsage,
    Instance,
    InstanceEvent,
    InstanceEventKind,
    InstanceStatus,
    InstanceWatcher,
    LogKind,
    LogPage,
    Readiness,
    Release,
)
from appdeck.runtime.driver import LogLine

LOCAL = Capabilities(
    own_network=True,
    namespaced_upstreams=False,
    host_processes=True,
    in_place_restart=True,
    indexed_instances=True,
    driver_grep=True,
    app_disks=False,
)
"""What the fake says it can do: the sandboxed local driver's answers (its upstreams are
plain addresses, though)."""


KUBERNETES = Capabilities(
    own_network=True,
    namespaced_upstreams=False,
    host_processes=False,
    in_place_restart=False,
    indexed_instances=False,
    driver_grep=False,
    app_disks=False,
)
"""The Kubernetes driver's column (``runtime/kubernetes/driver.py``): with it the fake gives
every instance of a release its Service's address, as that driver does."""


def upstream(port: int) -> str:
    return f"127.0.0.1:{port}"


def instance(release_id: str, index: int, upstream: str) -> Instance:
    """An instance as the fake makes them (its start time: its index)."""
    return Instance(release_id, index, upstream, float(index))


@dataclass
class FakeDriver:
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

    capabilities_: Capabilities = LOCAL

    def capabilities(self) -> Capabilities:
        return self.capabilities_

    async def prepare(self, release: Release, *, rebuild: bool = False) -> None:
        self.calls.append(f"prepare {release.release_id}")
        self.prepared.append(release.release_id)
        if release.spec.build_command == "false":
            raise BuildFailed("the build command exited with status 1")

    async def start(self, release: Release, index: int) -> Instance:
        if index in self.running_.get(release.release_id, {}):  # as the real driver says
            raise Conflict(f"instance {index} of release {release.release_id} is already running")
        if self.capabilities_.indexed_instances:
            address = upstream(next(self.ports))
        else:  # one Service per release, every pod behind it
            address = f"r{release.release_id}.appdeck-acme.svc:80"
        started = instance(release.release_id, index, address)
        self.calls.append(f"start {release.release_id}#{index} {started.upstream}")
        self.running_.setdefault(release.release_id, {})[index] = started
        return started

    async def wait_ready(self, release: Release, instance: Instance, within_s: float) -> Readiness:
        self.calls.append(f"ready? {instance.release_id}#{instance.index}")
        planned = self.health_plan.pop(0) if self.health_plan else None
        ok = planned if planned is not None else release.env.get("UNHEALTHY") != "1"
        return Readiness(True, "") if ok else Readiness(False, self.why(release))

    def why(self, release: Release) -> str:
        """What an instance that never got ready says."""
        return f"GET {release.spec.health_check.path} answered 503"

    async def gave_up(self, release_id: str) -> bool:
        return False

    async def stop(self, release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        self.calls.append(f"stop {release_id}" + ("" if index is None else f"#{index}"))
        if index is None:
            self.running_.pop(release_id, None)
        else:
            self.running_.get(release_id, {}).pop(index, None)

    async def running(self, release_id: str) -> list[Instance]:
        self.calls.append(f"running {release_id}")
        return [i for _, i in sorted(self.running_.get(release_id, {}).items())]

    async def recover(self, release: Release) -> Adoption:
        self.calls.append(f"recover {release.release_id}")
        found = self.adoptable.pop(release.release_id, {})
        self.running_.setdefault(release.release_id, {}).update(found)
        return Adoption(list(found.values()), [])

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        if release_id in self.statuses:
            return self.statuses[release_id]
        running = self.running_.get(release_id, {})
        return [InstanceStatus(index, "running") for index in sorted(running)]

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        return self.disks.get(app_id)

    def events(self, watcher: InstanceWatcher) -> None:
        self.watchers.append(watcher)

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage:
        """Every release logs two lines of each kind."""
        lines = [LogLine(1.0, "stdout", f"{kind} line {i} of {release_id}", i, 0) for i in range(2)]
        start = cursor or 0
        lines = [x for x in lines if x.seq >= start and (not grep or grep in x.text)][:limit]
        return LogPage(lines, (lines[-1].seq + 1) if lines else start)

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage:
        return await self.logs(release_id, kind, cursor, limit, grep)

    async def releases(self) -> list[str]:
        return list(self.running_)

    async def remove(self, release_id: str) -> None:
        await self.stop(release_id)

    async def remove_app(self, app_id: int) -> None:
        return None

    async def detach(self) -> None:
        return None

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
    gateway: bool = False
    """A Gateway API router: the routes are not fed to the ingress (whose backends take
    loopback upstreams only); :meth:`serves` is then not asked."""

    def route(self, route: str, backends: list[Backend]) -> None:
        stopped = [b.release_id for b in backends] == [STOPPED]  # a stopped app: 503 "stopped"
        assert stopped or sum(b.weight for b in backends) == 100
        assert all(b.upstreams for b in backends if b.weight), backends
        assert "--" in route, f"{route!r} is a bare name, not an app's route key"
        self.table[route] = backends
        said = " ".join(f"{b.release_id}={b.weight}{list(b.upstreams)}" for b in backends)
        self.calls.append(f"route {route} {said}")
        self.history.append({b.release_id: b.weight for b in backends})
        if not self.gateway:
            self.ingress.route(route, backends)

    def unroute(self, route: str) -> None:
        assert "--" in route, f"{route!r} is a bare name, not an app's route key"
        self.table.pop(route, None)
        self.calls.append(f"unroute {route}")
        self.history.append({})
        if not self.gateway:
            self.ingress.unroute(route)

    def mark(self, route: str, release_id: str) -> None:
        self.calls.append(f"mark {route} {release_id}")

    def window(self, route: str, release_id: str) -> tuple[int, int]:
        rate = self.error_rates.get(release_id, 0.0)
        return 100, int(rate * 100)

    def apply(self, route: str, backends: list[Backend]) -> None:
        """One table (no other replica to leave out): a route change like any other."""
        if backends:
            self.route(route, backends)
        else:
            self.unroute(route)

    async def published(self) -> None:
        """Nothing to wait for: no other replica, no data plane of its own."""

    def weights(self, route: str) -> dict[str, int]:
        return {b.release_id: b.weight for b in self.table.get(route, [])}

    def serves(self, host: str) -> str | None:
        """The release the ingress would send a request for ``host`` to (a 100 % route)."""
        resolved = self.ingress.table.resolve(host.encode())
        return None if resolved is None else resolved.backend.release_id
