"""An app's health, for agents and operators: one service computes the facts, and the
status resource, ``manage_app get``, ``list_my_apps``, the CLI and the app series adapt them.

The facts: the live release (number, strategy, since when), instances up against desired,
and per instance its state, restarts, last exit (``status N`` or ``signal NAME``), OOM kills,
memory and CPU (the runtime driver's :meth:`~appdeck.runtime.driver.Driver.inspect`); the app's
disk against its quota; requests, 5xx and mean latency over the last few minutes
(:mod:`.traffic`); the certificate of its public hostname. Every one of them is a count, a
number, a word of ours or a timestamp: nothing the app controls becomes text here.

Crashes reach subscribers as ``instance.updated`` changes: the runtime tells the service
(:meth:`~appdeck.runtime.driver.Driver.events`), the service emits the change for the app's
tenant. The same events are counted for the app series (restarts, crash loops, OOM kills:
counters of this process, which Prometheus' ``rate`` reads across restarts).

The app series read :attr:`HealthService.catalogue`: the apps with a live release, cached
(refreshed after app and deployment changes, and every ``refresh_s``) so that a scrape
makes no database query at all; and their instances as :meth:`HealthService.measure` last
read them (every ``measure_s``, in a thread), so that a scrape reads no cgroup file either:
it runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from appdeck.common.identity import Principal
from appdeck.ingress.routes import Counters
from appdeck.model import hostnames
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.deploy.ports import DiskUsage, Driver, InstanceEvent, InstanceStatus
from appdeck.platform.traffic import Traffic, TrafficRing
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord, DeploymentStore

log = logging.getLogger("appdeck.health")

AppState = Literal["running", "degraded", "crash_loop", "stopped", "not_deployed"]
REFRESH_S: Final = 30.0
NO_TRAFFIC: Final = Traffic(0.0, 0, 0, None)
MEASURE_S: Final = 10.0
"""How often the live releases' instances are measured for the app series (in a thread)."""
MAX_PENDING_EVENTS: Final = 256
"""Instance events waiting to become changes; past it they are dropped (a subscriber reads
the status again at the next one)."""


class RuntimeView(Protocol):
    """What the facts need of a runtime: a narrow view of the driver
    (:class:`~appdeck.runtime.driver.Driver`), which the CLI's reader of a data dir
    (:class:`~appdeck.runtime.inspection.RecordedInstances`) also has."""

    def inspect(self, release_id: str) -> list[InstanceStatus]: ...
    def disk_usage(self, app_id: int) -> DiskUsage | None: ...


@dataclass(frozen=True, slots=True)
class LiveRelease:
    number: int
    strategy: str
    since: float
    """When it last changed state (went live), epoch seconds."""


@dataclass(frozen=True, slots=True)
class AppHealth:
    app_id: int
    state: AppState
    live: LiveRelease | None
    up: int
    desired: int
    instances: list[InstanceStatus]
    disk: DiskUsage | None
    traffic: Traffic
    tls: dict[str, Any] | None = None

    @property
    def restarts(self) -> int:
        return sum(i.restarts for i in self.instances)

    def public(self) -> dict[str, Any]:
        """The full facts, as the status resource and ``manage_app get`` show them."""
        return {
            "app_id": self.app_id,
            "state": self.state,
            "live": None
            if self.live is None
            else {
                "number": self.live.number,
                "strategy": self.live.strategy,
                "since": self.live.since,
            },
            "instances": {"up": self.up, "desired": self.desired},
            "restarts": self.restarts,
            "instance_details": [_instance(i) for i in self.instances],
            "disk": None
            if self.disk is None
            else {"used_bytes": self.disk.used_bytes, "quota_bytes": self.disk.quota_bytes},
            "traffic": self.traffic.public(),
            "tls": self.tls,
        }

    def brief(self) -> dict[str, Any]:
        """The compact form ``list_my_apps`` shows."""
        return {
            "state": self.state,
            "up": self.up,
            "desired": self.desired,
            "restarts": self.restarts,
        }


def _instance(status: InstanceStatus) -> dict[str, Any]:
    return {
        "index": status.index,
        "state": status.state,
        "restarts": status.restarts,
        "last_exit": status.last_exit,
        "oom_kills": status.oom_kills,
        "memory_bytes": status.memory_bytes,
        "cpu_seconds": None if status.cpu_seconds is None else round(status.cpu_seconds, 3),
        "started_at": status.started_at,
    }


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    """One app with a live release, as the app series need it."""

    app_id: int
    route: str
    """The app's route key (``<app>--<tenant>``): the ``app`` label when labels suffice."""
    release_id: str
    desired: int


@dataclass(slots=True)
class EventCounts:
    """Instance events of one app seen by this process (the series' counters)."""

    restarts: int = 0
    crash_loops: int = 0
    oom_kills: int = 0


@dataclass(slots=True)
class _Catalogue:
    entries: list[CatalogueEntry] = field(default_factory=list)
    refreshed: float = 0.0
    stale: bool = True


class HealthService:
    def __init__(
        self,
        apps: AppService,
        store: DeploymentStore,
        runtime: Driver,
        counters: Counters,
        feed: ChangeFeed,
        *,
        tls_of: Callable[[AppRecord], dict[str, Any] | None] | None = None,
        refresh_s: float = REFRESH_S,
        measure_s: float = MEASURE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._apps = apps
        self._store = store
        self._runtime = runtime
        self.counters = counters
        self._feed = feed
        self._tls_of = tls_of
        self._refresh_s = refresh_s
        self._measure_s = measure_s
        self._measured: dict[str, list[InstanceStatus]] = {}
        self._measured_at = 0.0
        self._disks: dict[int, DiskUsage] = {}
        self._clock = clock
        self.traffic = TrafficRing(counters, clock=clock)
        self._catalogue = _Catalogue()
        self.events: dict[int, EventCounts] = {}
        self._pending: set[asyncio.Task[None]] = set()
        runtime.events(self._seen)
        feed.subscribe(self._changed)

    # -- the facts ---------------------------------------------------------------------

    async def status(self, principal: Principal, app_id: int) -> AppHealth:
        """The app's health (viewer and up)."""
        view = await self._apps.load(principal, app_id, "app.read")
        live = await self._store.for_app(app_id, states=["live"], limit=1)
        return self.facts(view.app, live[0] if live else None)

    async def briefs(self, apps: list[AppRecord], *, traffic: bool = False) -> dict[int, AppHealth]:
        """The health of each of ``apps`` (already loaded for their caller): one query.
        ``traffic``: with each app's traffic window too (no query: the data plane's counters)."""
        live = await self._store.live_for(a.id for a in apps)
        if traffic:
            return {a.id: self._with_traffic(a, live.get(a.id)) for a in apps}
        return {a.id: self.facts(a, live.get(a.id), brief=True) for a in apps}

    def _with_traffic(self, app: AppRecord, live: DeploymentRecord | None) -> AppHealth:
        route = hostnames.route_label(app.name, app.tenant_id)
        return health_of(app, live, self._runtime, self.traffic.window(route))

    def facts(
        self, app: AppRecord, live: DeploymentRecord | None, *, brief: bool = False
    ) -> AppHealth:
        """The health of ``app`` whose live deployment is ``live`` (no database query);
        ``brief``: without traffic and TLS (what :meth:`AppHealth.brief` shows)."""
        if brief:
            return health_of(app, live, self._runtime, NO_TRAFFIC)
        route = hostnames.route_label(app.name, app.tenant_id)
        tls = self._tls_of(app) if self._tls_of is not None else None
        return health_of(app, live, self._runtime, self.traffic.window(route), tls)

    # -- the catalogue the app series read ---------------------------------------------

    @property
    def catalogue(self) -> list[CatalogueEntry]:
        """The apps with a live release, as last refreshed (no query: a scrape reads it)."""
        return self._catalogue.entries

    def measured(self, release_id: str) -> list[InstanceStatus]:
        """The release's instances as last measured (:meth:`measure`): what a scrape reads,
        never the runtime itself (a scrape runs on the event loop)."""
        return self._measured.get(release_id, [])

    async def measure(self) -> None:
        """Inspect every live release of the catalogue and its app's disk, in a thread (two
        cgroup files per instance and a state file per release: 0.4-0.7 s for 1,000 apps
        of 2 instances on a loaded 2-core VM, bench/RESULTS.md)."""
        entries = list(self._catalogue.entries)
        runtime = self._runtime

        def inspect_all() -> tuple[dict[str, list[InstanceStatus]], dict[int, DiskUsage]]:
            disks = {e.app_id: runtime.disk_usage(e.app_id) for e in entries}
            return (
                {e.release_id: runtime.inspect(e.release_id) for e in entries},
                {app_id: disk for app_id, disk in disks.items() if disk is not None},
            )

        self._measured, self._disks = await asyncio.to_thread(inspect_all)
        self._measured_at = self._clock()

    def measured_disk(self, app_id: int) -> DiskUsage | None:
        """The app's disk as last measured (:meth:`measure`)."""
        return self._disks.get(app_id)

    async def refresh(self) -> None:
        """Read the apps and their live releases again (two queries in all)."""
        self._catalogue.stale = False
        apps = {a.id: a for a in await self._apps.store.all_apps()}
        live = {r.app_id: r for r in await self._store.in_states(["live"])}
        entries = []
        for app_id in sorted(live.keys() & apps.keys()):
            app, record = apps[app_id], live[app_id]
            entries.append(
                CatalogueEntry(
                    app_id,
                    hostnames.route_label(app.name, app.tenant_id),
                    record.release_id,
                    0 if app.stopped else _desired(record.spec),
                )
            )
        self._catalogue.entries = entries
        self._catalogue.refreshed = self._clock()

    async def tick(self) -> None:
        """One round of the background loop: a traffic sample; the catalogue refreshed when
        a change made it stale or it is older than ``refresh_s``."""
        self.traffic.sample()
        catalogue = self._catalogue
        if catalogue.stale or self._clock() - catalogue.refreshed >= self._refresh_s:
            await self.refresh()
            await self.measure()
        elif self._clock() - self._measured_at >= self._measure_s:
            await self.measure()

    async def run_forever(self, stopping: asyncio.Event, every_s: float = 5.0) -> None:
        while not stopping.is_set():
            try:
                await self.tick()
            except Exception:
                log.exception("health sampling failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(every_s):
                    await stopping.wait()

    async def settle(self) -> None:
        """Wait (bounded) for the instance events being turned into changes (tests)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=10)

    # -- events ------------------------------------------------------------------------

    async def _changed(self, change: Change) -> None:
        if change.kind in ("app.created", "app.deleted", "app.updated", "deployment.updated"):
            self._catalogue.stale = True

    def _seen(self, event: InstanceEvent) -> None:
        counts = self.events.get(event.app_id)
        if counts is None:
            counts = self.events[event.app_id] = EventCounts()
        if event.kind == "restarted":
            counts.restarts += 1
        elif event.kind == "given_up":
            counts.crash_loops += 1
        elif event.kind == "oom_killed":
            counts.oom_kills += 1
        if len(self._pending) >= MAX_PENDING_EVENTS:
            return
        task = asyncio.get_running_loop().create_task(self._announce(event))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _announce(self, event: InstanceEvent) -> None:
        try:
            app = await self._apps.store.get(event.app_id)
            if app is None:
                return
            number = event.release_id.partition("-")[2]
            deployment = int(number) if number.isdigit() else None
            await self._feed.emit(Change("instance.updated", app.tenant_id, app.id, deployment))
        except Exception:
            log.exception("announcing %s failed", event)


def health_of(
    app: AppRecord,
    live: DeploymentRecord | None,
    runtime: RuntimeView,
    traffic: Traffic,
    tls: dict[str, Any] | None = None,
) -> AppHealth:
    """The facts of ``app`` (the one computation: the service and the operator's CLI)."""
    disk = runtime.disk_usage(app.id)
    if live is None:
        return AppHealth(app.id, "not_deployed", None, 0, 0, [], disk, traffic, tls)
    instances = runtime.inspect(live.release_id)
    desired = 0 if app.stopped else _desired(live.spec)
    up = sum(1 for i in instances if i.state == "running")
    state: AppState = "running"
    if app.stopped:
        state = "stopped"
    elif any(i.state == "crash_loop" for i in instances):
        state = "crash_loop"
    elif up < desired:
        state = "degraded"
    release = LiveRelease(live.number, live.strategy, live.updated_at)
    return AppHealth(app.id, state, release, up, desired, instances, disk, traffic, tls)


def _desired(spec: dict[str, Any]) -> int:
    value = spec.get("instances", 1)
    return value if isinstance(value, int) and value >= 0 else 1
