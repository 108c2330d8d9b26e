"""The deploy engine's Router port on the ingress router's route table and counters."""

from __future__ import annotations

from appdeck.platform.deploy.ports import Backend
from appdeck.platform.ingress import routes as ingress


class IngressRouter:
    def __init__(self, table: ingress.RouteTable, counters: ingress.Counters) -> None:
        self.table = table
        self.counters = counters
        self._marks: dict[tuple[str, str], ingress.Mark] = {}

    def route(self, app_name: str, backends: list[Backend]) -> None:
        self.table.set(
            app_name,
            [ingress.Backend(b.release_id, b.weight, tuple(b.upstreams)) for b in backends],
        )

    def unroute(self, app_name: str) -> None:
        """The app stays known (503 "no live release"), with no backend."""
        self.table.set(app_name, [])

    def forget(self, app_name: str) -> None:
        """The app is gone (404)."""
        self.table.remove(app_name)
        self.counters.forget(app_name)

    def mark(self, app_name: str, release_id: str) -> None:
        self._marks[(app_name, release_id)] = self.counters.mark(app_name, release_id)

    def window(self, app_name: str, release_id: str) -> tuple[int, int]:
        mark = self._marks.get((app_name, release_id))
        stats = self.counters.since(mark) if mark else self.counters.get(app_name, release_id)
        return stats.requests, stats.status_5xx
