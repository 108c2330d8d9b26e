"""Hostnames beyond the route rule: custom domains (``shop.example.com``) an app's owner has
proved, each mapped to its app's route key.

An app always answers at ``<route key>.localhost`` and, with ``APPDECK_APPS_DOMAIN``, at
``<route key>.<apps domain>`` (:class:`~appdeck.ingress.routes.RouteTable` matches those by
suffix). A custom domain is an exact host, served only once the control plane put it here
(after its owner proved control: ``platform/domains``). The data plane looks here first.

    hosts = HostMap()
    hosts.set("shop.example.com", "shop--acme")
    hosts.route_of("SHOP.example.com:443")  # "shop--acme"
"""

from __future__ import annotations

import re
from typing import Final

from appdeck.ingress.watched import Watched

HOST: Final = re.compile(r"(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")
"""A public DNS name, lower case, at least two labels, no trailing dot."""
ROUTE: Final = re.compile(r"[a-z0-9-]{1,63}")


def normalize(host: str) -> str | None:
    """``host`` lower-cased, without ``:port`` and a trailing dot; None when not a DNS name."""
    name = host.strip().lower()
    if name.startswith("["):
        return None
    name = name.rsplit(":", 1)[0] if ":" in name else name
    name = name.rstrip(".")
    return name if HOST.fullmatch(name) else None


class HostMap(Watched[str]):
    """Custom domain → route key."""

    def set(self, host: str, route: str) -> None:
        name = normalize(host)
        if name is None:
            raise ValueError(f"invalid hostname {host!r}")
        if not ROUTE.fullmatch(route):
            raise ValueError(f"invalid route key {route!r}")
        self._put(name, route)

    def remove(self, host: str) -> None:
        name = normalize(host)
        if name is not None:
            self._drop(name)

    def route_of(self, host: str) -> str | None:
        """The route key a ``Host`` header names through a custom domain, or None."""
        name = normalize(host)
        return None if name is None else self.get(name)
