"""What the deploy engine needs from a runtime (processes) and a router (traffic).

The runtime is the one driver seam, :class:`appdeck.runtime.driver.Driver` (the local
process driver implements it; a Kubernetes driver can); the router is :class:`RouterPort`
(the ingress router, :mod:`.ingress_router`). A release has one shape from here to the
driver: :class:`appdeck.model.release.Release`; a route's backends are the ingress's
:class:`~appdeck.ingress.routes.Backend`; a failed build is the driver's
:class:`~appdeck.runtime.driver.BuildFailed`.
"""

from __future__ import annotations

from typing import Protocol

from appdeck.ingress.routes import Backend as Backend
from appdeck.model.release import Release as Release
from appdeck.runtime.driver import Adoption as Adoption
from appdeck.runtime.driver import BuildFailed as BuildFailed
from appdeck.runtime.driver import Capabilities as Capabilities
from appdeck.runtime.driver import DiskUsage as DiskUsage
from appdeck.runtime.driver import Driver as Driver
from appdeck.runtime.driver import Instance as Instance
from appdeck.runtime.driver import InstanceEvent as InstanceEvent
from appdeck.runtime.driver import InstanceEventKind as InstanceEventKind
from appdeck.runtime.driver import InstanceStatus as InstanceStatus
from appdeck.runtime.driver import InstanceWatcher as InstanceWatcher
from appdeck.runtime.driver import LogKind as LogKind
from appdeck.runtime.driver import LogPage as LogPage
from appdeck.runtime.driver import Readiness as Readiness


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
