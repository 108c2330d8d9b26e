"""The ingress's shared parts: the route table (``Host: <app>--<tenant>.localhost`` → the app's
live release, weighted for canaries), per-release counters for canary analysis, host names,
API-key checks, certificates and error pages. HAProxy serves the traffic
(:mod:`appdeck.ingress.haproxy`); the table is keyed by route key, the host's first label
(:mod:`appdeck.model.hostnames` gives an app's).

    routes = RouteTable()
    routes.set("blog--acme", [Backend("r7", 90, ["127.0.0.1:9101"]), Backend("r8", 10, [...])])
"""

from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.pages import error_page
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

__all__ = [
    "ROUTE_KEY",
    "STOPPED",
    "Backend",
    "Counters",
    "Mark",
    "ProxyConfig",
    "ReleaseStats",
    "Resolved",
    "RouteTable",
    "error_page",
]
