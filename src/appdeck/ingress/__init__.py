"""The ingress router: ``Host: <app>--<tenant>.localhost`` → the app's live release (weighted
for canaries), on its own port, with per-release counters for canary analysis. The table is
keyed by route key, the host's first label (:mod:`appdeck.model.hostnames` gives an app's).

    routes = RouteTable()
    routes.set("blog--acme", [Backend("r7", 90, ["127.0.0.1:9101"]), Backend("r8", 10, [...])])
    server = IngressServer(routes, Counters(), port=8088)
    port = await server.start()
"""

from appdeck.ingress.proxy import IngressProxy, ProxyConfig, error_page
from appdeck.ingress.routes import (
    ROUTE_KEY,
    STOPPED,
    Backend,
    Counters,
    Mark,
    ReleaseStats,
    Resolved,
    RouteTable,
)
from appdeck.ingress.server import IngressServer

__all__ = [
    "ROUTE_KEY",
    "STOPPED",
    "Backend",
    "Counters",
    "IngressProxy",
    "IngressServer",
    "Mark",
    "ProxyConfig",
    "ReleaseStats",
    "Resolved",
    "RouteTable",
    "error_page",
]
