"""What the deploy engine needs from a runtime (processes) and a router (traffic).

The runtime is the one driver seam, :class:`appdeck.runtime.driver.Driver` (the local
process driver implements it; a Kubernetes driver can); the router is :class:`RouterPort`
(the ingress router, :mod:`.ingress_router`). A release has one shape from here to the
driver: :class:`appdeck.model.release.Release`; a route's backends are :class:`Backend` (each
router checks what it can serve: the ingress's own ``Backend`` takes loopback upstreams only);
a failed build is the driver's :class:`~appdeck.runtime.driver.BuildFailed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

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


@dataclass(frozen=True, slots=True)
class Backend:
    """A release's share of a route, as the engine hands it to its router: the weight, and
    the upstreams the driver gave the release's instances, as given (``127.0.0.1:<port>``
    locally, the release's Service ``<svc>.<ns>.svc:80`` on Kubernetes, where every instance
    has the same one: listed once). What a router can serve is its own check: the ingress's
    :class:`appdeck.ingress.routes.Backend` (the HAProxy data plane's table) refuses anything
    but loopback, the Gateway API router reads only the release id and weight."""

    release_id: str
    weight: int
    upstreams: Sequence[str] = field(default=())

    def __post_init__(self) -> None:
        if type(self.weight) is not int or not 0 <= self.weight <= 100:
            raise ValueError(f"release {self.release_id}: weight must be an int in 0..100")
        object.__setattr__(self, "upstreams", tuple(dict.fromkeys(self.upstreams)))


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
