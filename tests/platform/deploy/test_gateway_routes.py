"""``GatewayRoutes``: the platform's router when a cluster's gateway carries the traffic. What
reaches the gateway (a fake here; the real one on kmock is tests/test_kube_setup.py)."""

from __future__ import annotations

from collections.abc import Sequence

from appdeck.platform.deploy.gateway_routes import GatewayRoutes
from appdeck.platform.deploy.ports import Backend
from appdeck.platform.deploy.running import STOPPED_ROUTE


def loaded(gateway: FakeGateway) -> GatewayRoutes:
    """The router with its key gate loaded (the platform's start does it before any route)."""
    router = GatewayRoutes(gateway)
    router.keys.loaded()
    return router


class FakeGateway:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, object]] = []
        self.windows: dict[tuple[str, str], tuple[int, int]] = {}

    def route(self, route: str, backends: Sequence[Backend]) -> None:
        self.calls.append(("route", route, [(b.release_id, b.weight) for b in backends]))

    def unroute(self, route: str) -> None:
        self.calls.append(("unroute", route, None))

    def mark(self, route: str, release_id: str) -> None:
        self.calls.append(("mark", route, release_id))

    def window(self, route: str, release_id: str) -> tuple[int, int]:
        return self.windows.get((route, release_id), (0, 0))

    async def published(self) -> None:
        self.calls.append(("published", "", None))

    async def close(self) -> None:
        self.calls.append(("close", "", None))


def test_a_route_never_written_here_is_left_as_the_cluster_has_it() -> None:
    gateway = FakeGateway()
    router = GatewayRoutes(gateway)
    router.unroute("shop--acme")  # the restore after a restart, before the reconcile
    router.apply("shop--acme", [])
    assert gateway.calls == []
    assert router.routes() == ["shop--acme"]  # known here: no backend, served there


def test_weights_go_to_the_gateway_and_a_stopped_app_loses_its_route() -> None:
    gateway = FakeGateway()
    router = loaded(gateway)
    router.route("shop--acme", [Backend("7-2", 10, ("s.ns.svc:80",)), Backend("7-1", 90)])
    router.apply("shop--acme", [Backend("7-2", 100)])  # the reconcile's: the gateway's too
    router.route("shop--acme", list(STOPPED_ROUTE))
    router.route("shop--acme", list(STOPPED_ROUTE))  # deleted once
    assert gateway.calls == [
        ("route", "shop--acme", [("7-2", 10), ("7-1", 90)]),
        ("route", "shop--acme", [("7-2", 100)]),
        ("unroute", "shop--acme", None),
    ]
    assert router.table.get("shop--acme") == []


def test_forgetting_a_written_route_deletes_it_and_the_table_forgets_the_app() -> None:
    gateway = FakeGateway()
    router = loaded(gateway)
    router.route("shop--acme", [Backend("7-1", 100)])
    router.forget("shop--acme")
    assert gateway.calls[-1] == ("unroute", "shop--acme", None)
    assert router.routes() == []


async def test_canary_windows_publishing_and_closing_are_the_gateways() -> None:
    gateway = FakeGateway()
    gateway.windows[("shop--acme", "7-2")] = (40, 3)
    router = GatewayRoutes(gateway)
    router.mark("shop--acme", "7-2")
    assert router.window("shop--acme", "7-2") == (40, 3)
    await router.published()
    await router.close()
    assert [c[0] for c in gateway.calls] == ["mark", "published", "close"]


def test_an_app_requiring_api_keys_is_never_routed_on_the_gateway_which_checks_none() -> None:
    gateway = FakeGateway()
    router = GatewayRoutes(gateway)
    router.route("shop--acme", [Backend("7-1", 100)])  # the gate not loaded: closed
    assert gateway.calls == []
    router.keys.loaded()
    router.route("shop--acme", [Backend("7-1", 100)])
    router.keys.set_app(7, "shop--acme", True)  # its spec now says api_auth: required
    router.route("shop--acme", [Backend("7-2", 100)])
    assert gateway.calls == [
        ("route", "shop--acme", [("7-1", 100)]),
        ("unroute", "shop--acme", None),
    ]
