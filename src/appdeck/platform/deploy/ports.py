"""What the deploy engine needs from a runtime (processes) and a router (traffic).

Narrow on purpose: the local-process driver and the ingress router implement them through
small adapters (:mod:`.local_runtime`, :mod:`.ingress_router`), and a Kubernetes driver could
(Deployments, Services, weighted routes). A release has one shape from here to the driver:
:class:`appdeck.model.release.Release`; a route's backends are the ingress's
:class:`~appdeck.ingress.routes.Backend`; a failed build is the driver's
:class:`~appdeck.runtime.driver.BuildFailed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from appdeck.ingress.routes import Backend as Backend
from appdeck.model.release import Release as Release
from appdeck.runtime.driver import BuildFailed as BuildFailed
from appdeck.runtime.driver import DiskUsage as DiskUsage
from appdeck.runtime.driver import InstanceEvent as InstanceEvent
from appdeck.runtime.driver import InstanceEventKind as InstanceEventKind
from appdeck.runtime.driver import InstanceStatus as InstanceStatus
from appdeck.runtime.driver import InstanceWatcher as InstanceWatcher


@dataclass(frozen=True, slots=True)
class Instance:
    """A started instance, as traffic reaches it."""

    release_id: str
    index: int
    upstream: str
    """``127.0.0.1:<port>``, or ``<netns>@127.0.0.1:<port>`` for a sandboxed instance."""


class RuntimePort(Protocol):
    async def prepare(self, release: Release) -> None: ...
    async def start(self, release: Release, index: int) -> Instance: ...
    async def wait_healthy(self, release: Release, instance: Instance, within_s: float) -> bool: ...
    async def why_unhealthy(self, release: Release, instance: Instance) -> str:
        """In words, after :meth:`wait_healthy` said no: what the last check saw."""
        ...

    async def stop(self, release_id: str, index: int | None = None) -> None: ...
    async def running(self, release_id: str) -> list[Instance]: ...
    async def adopt(self, release: Release) -> list[Instance]: ...
    async def crash_looping(self, release_id: str) -> bool: ...
    def inspect(self, release_id: str) -> list[InstanceStatus]:
        """The release's instances as the runtime knows them now (no waiting: a metrics
        scrape reads every app's); a runtime that knows less fills in less."""
        ...

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        """The app's disk used against its quota, as last known (None: not counted)."""
        ...

    def watch(self, watcher: InstanceWatcher) -> None:
        """Call ``watcher`` when an instance crashes, restarts, is OOM-killed or given up."""
        ...


class RouterPort(Protocol):
    """Traffic by route key (a :class:`Release`'s ``route``), one app per key."""

    def route(self, route: str, backends: list[Backend]) -> None: ...
    def unroute(self, route: str) -> None: ...
    def mark(self, route: str, release_id: str) -> None: ...
    def window(self, route: str, release_id: str) -> tuple[int, int]:
        """Requests and 5xx answers for the release since its last :meth:`mark`."""
        ...

    def apply(self, route: str, backends: list[Backend]) -> None:
        """Route ``route`` in this replica's own table only, unannounced (no backend: known,
        with nothing to serve): what every replica does by itself, as after a restart, where
        :meth:`route` would tell the others what they already route. A router with no table of
        its own (one replica, a gateway) treats it as :meth:`route` or :meth:`unroute`."""
        ...

    async def published(self) -> None:
        """Wait (bounded) until the route changes made so far are in effect everywhere traffic
        comes in (the other replicas' ingresses, this host's data plane): an instance is
        stopped only after it. At once where there is nothing to wait for."""
        ...
