"""The deploy engine's Router port on the ingress router's route table and counters.

Everything is keyed by route key (an app's is ``<app>--<tenant>``, from
:mod:`appdeck.platform.hostnames`), so two tenants' apps of one name never touch each other's
route, counters or canary marks.
"""

from __future__ import annotations

from appdeck.platform.deploy.ports import Backend
from appdeck.platform.ingress import routes as ingress
from appdeck.platform.ingress.keys import KeyGate


class IngressRouter:
    def __init__(
        self,
        table: ingress.RouteTable,
        counters: ingress.Counters,
        keys: KeyGate | None = None,
    ) -> None:
        self.table = table
        self.counters = counters
        self.keys = keys if keys is not None else KeyGate()
        """The API keys the ingress checks (shared with the proxy)."""
        self._marks: dict[tuple[str, str], ingress.Mark] = {}

    def route(self, route: str, backends: list[Backend]) -> None:
        self.table.set(
            route,
            [ingress.Backend(b.release_id, b.weight, tuple(b.upstreams)) for b in backends],
        )

    def unroute(self, route: str) -> None:
        """The app stays known (503 "no live release"), with no backend."""
        self.table.set(route, [])

    def forget(self, route: str) -> None:
        """The app is gone (404)."""
        self.table.remove(route)
        self.counters.forget(route)
        for key in [k for k in self._marks if k[0] == route]:
            del self._marks[key]

    def move(self, old: str, new: str) -> None:
        """The app's key changed (it was renamed): ``new`` serves what ``old`` did, ``old``
        is gone. Only these two keys change."""
        self.table.set(new, self.table.get(old) or [])
        self.forget(old)

    def mark(self, route: str, release_id: str) -> None:
        self._marks[(route, release_id)] = self.counters.mark(route, release_id)

    def window(self, route: str, release_id: str) -> tuple[int, int]:
        mark = self._marks.get((route, release_id))
        stats = self.counters.since(mark) if mark else self.counters.get(route, release_id)
        return stats.requests, stats.status_5xx
