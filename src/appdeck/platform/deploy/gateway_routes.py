"""The platform's router when a cluster's gateway carries the apps' traffic
(``APPDECK_RUNTIME=kubernetes``): the same :class:`IngressRouter` the platform's services
read (its table says what each app serves; the API-key gate and the counters are there, and
stay empty), with every route change written to the gateway too (an HTTPRoute per app, by
:class:`~appdeck.runtime.kubernetes.router.GatewayRouter`, which the composition root hands
in as a :class:`Gateway`).

- ``route`` / ``apply`` with a release that has weight: the gateway routes the app's releases
  with those weights (a release id that is no release, the "stopped" marker, is left out).
- ``unroute`` / ``forget``, a stopped app, ``apply`` with no weight: the app's HTTPRoute is
  deleted (the gateway answers 404) — **only for a route this process wrote to the gateway**.
  After a restart every app is unrouted here before its live release is routed again (the
  platform's restore, then the reconcile): deleting every HTTPRoute then would cut every
  app's traffic for the time of a restart. A route never written since the start is left as
  the cluster has it; the driver's ``remove_app`` deletes an app's HTTPRoute with the app.
- **API keys.** The gateway checks none of AppDeck's API keys, so an app whose spec says
  ``api_auth: required`` (a route the key gate requires) is never routed there: its route is
  withheld (logged), and deleted when the gate starts requiring it (the gate's changes are
  followed). Such an app is not reachable on this runtime rather than reachable without keys.
- ``mark`` / ``window``: the gateway's per-backend counters (canary analysis).
- ``published``: this table's replicas (none: one replica serves Kubernetes), then the gateway's
  writes, whose error it raises.

The table knows every app's key but holds no backend: this host serves no app's traffic (the
ingress's backends are loopback upstreams; the gateway reaches a release's Service itself).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Final, Protocol

from appdeck.ingress import routes as ingress
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.platform.deploy.ports import Backend

log = logging.getLogger("appdeck.ingress")
_RELEASE: Final = re.compile(r"[0-9]{1,19}-[0-9]{1,19}")


class Gateway(Protocol):
    """What the router writes to: the apps' routes on a gateway (``GatewayRouter``)."""

    def route(self, route: str, backends: Sequence[Backend]) -> None: ...
    def unroute(self, route: str) -> None: ...
    def mark(self, route: str, release_id: str) -> None: ...
    def window(self, route: str, release_id: str) -> tuple[int, int]: ...
    async def published(self) -> None: ...
    async def close(self) -> None: ...


class GatewayRoutes(IngressRouter):
    """:class:`IngressRouter` whose routes are also the gateway's (see the module docs)."""

    def __init__(self, gateway: Gateway) -> None:
        super().__init__(ingress.RouteTable(), ingress.Counters())
        self.gateway = gateway
        self._written: set[str] = set()
        """Routes this process wrote to the gateway (only those are ever deleted there)."""
        self.keys.on_change(self._keys_changed)

    def apply(self, route: str, backends: Sequence[Backend | ingress.Backend] | None) -> None:
        super().apply(route, None if backends is None else [])  # known here, served there
        served = [b for b in backends or [] if _RELEASE.fullmatch(b.release_id)]
        wanted = sum(b.weight for b in served) > 0
        if wanted and route in self.keys.required:
            log.error(
                "%s requires API keys, which the cluster's gateway does not check: "
                "not routed there (api_auth: required is served by the local runtime)",
                route,
            )
        elif wanted:
            self.gateway.route(route, [Backend(b.release_id, b.weight) for b in served])
            self._written.add(route)
            return
        self._unwrite(route)

    def _unwrite(self, route: str) -> None:
        if route in self._written:
            self.gateway.unroute(route)
            self._written.discard(route)

    def _keys_changed(self) -> None:
        """An app routed on the gateway that now requires keys loses its route there."""
        for route in [r for r in self._written if r in self.keys.required]:
            log.error("%s now requires API keys: its route on the gateway is deleted", route)
            self._unwrite(route)

    def mark(self, route: str, release_id: str) -> None:
        self.gateway.mark(route, release_id)

    def window(self, route: str, release_id: str) -> tuple[int, int]:
        return self.gateway.window(route, release_id)

    async def published(self) -> None:
        await super().published()
        await self.gateway.published()

    async def close(self) -> None:
        await super().close()
        await self.gateway.close()
