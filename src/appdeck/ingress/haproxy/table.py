"""The route table the HAProxy data plane keeps in effect, and the instances started for a
route that HAProxy gets a server for (weight 0) before they are routed."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from appdeck.ingress.haproxy.config import server_name
from appdeck.ingress.hosts import HostMap
from appdeck.ingress.routes import Backend, RouteTable

EXPECTED_FOR_S: Final = 120.0
"""How long an instance started for a route (:meth:`HAProxyTable.expect`) is rendered at
weight 0 while it is not routed (a start's health check is bounded well below this)."""


class HAProxyTable(RouteTable):
    """A :class:`RouteTable` that tells the data plane about each change (``version``)."""

    def __init__(
        self,
        *,
        extra_domains: Iterable[str] = (),
        rng: random.Random | None = None,
        hosts: HostMap | None = None,
    ) -> None:
        super().__init__(extra_domains=extra_domains, rng=rng, hosts=hosts)
        self.version = 0
        """Counts every change, expected instances too (what the data plane syncs)."""
        self.routes_version = 0
        """Counts the route changes (what :meth:`HAProxyDataPlane.synced` waits for)."""
        self.listener: Callable[[], None] | None = None
        self._sets: dict[str, tuple[int, set[int], float]] = {}
        """release -> (its instances, the indices expected, when the last one was)."""
        self._expected: dict[str, dict[str, tuple[str, float]]] = {}
        """route -> server name -> (upstream, when it was started)."""

    def set(self, route: str, backends: Sequence[Backend]) -> None:
        super().set(route, backends)
        self.routes_version += 1
        self._changed()

    def remove(self, route: str) -> None:
        super().remove(route)
        self._expected.pop(route, None)
        self.routes_version += 1
        self._changed()

    def expect(
        self, route: str, release_id: str, index: int, upstream: str, *, of: int = 1
    ) -> None:
        """Instance ``index`` of ``release_id`` started for ``route`` and may be routed
        soon: HAProxy gets its server now, at weight 0 (the reload this needs runs while the
        instance starts, not when traffic moves to it). Only a route that serves already
        (its backend exists) takes it; forgotten after :data:`EXPECTED_FOR_S`. ``of``: how
        many instances the release has (see :meth:`set_starting`)."""
        if route not in self.keys():
            return
        when = time.monotonic()
        self._sets = {r: v for r, v in self._sets.items() if when - v[2] < EXPECTED_FOR_S}
        indices = self._sets.get(release_id, (of, set(), when))[1] | {index}
        self._sets[release_id] = (of, indices, when)
        self._expected.setdefault(route, {})[f"{release_id}-{index}"] = (upstream, when)
        self._changed()

    def expected(self) -> dict[str, dict[str, str]]:
        """route -> server name -> upstream of the instances expected now (not routed yet,
        started less than :data:`EXPECTED_FOR_S` ago)."""
        now = time.monotonic()
        out: dict[str, dict[str, str]] = {}
        for route, servers in list(self._expected.items()):
            routed = {
                server_name(b.release_id, upstream, n)
                for b in self.get(route) or []
                for n, upstream in enumerate(b.upstreams)
            }
            fresh = {
                n: v for n, v in servers.items() if now - v[1] < EXPECTED_FOR_S and n not in routed
            }
            if fresh:
                self._expected[route] = fresh
                out[route] = {name: upstream for name, (upstream, _) in fresh.items()}
            else:
                del self._expected[route]
        return out

    def set_starting(self) -> float:
        """When the last instance was expected of a release not every instance of which was
        (its set may be starting: the next instance ~40 ms later), or 0.0."""
        return max((v[2] for v in self._sets.values() if len(v[1]) < v[0]), default=0.0)

    def _changed(self) -> None:
        self.version += 1
        if self.listener is not None:
            self.listener()
