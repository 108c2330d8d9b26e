"""What the deploy engine needs from a runtime (processes) and a router (traffic).

Narrow on purpose: the local-process driver and the ingress router implement them through
small adapters, and a Kubernetes driver could (Deployments, Services, weighted routes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class BuildFailed(Exception):
    """Preparing or building a release failed; the message says why (with a log tail)."""


@dataclass(frozen=True, slots=True)
class Release:
    """One deployment of an app, as the runtime and the router see it.

    ``route`` is the app's route key (:func:`appdeck.platform.hostnames.route_label`,
    ``<app>--<tenant>``): the router routes, counts and marks by it, never by ``app_name``,
    which is unique only within a tenant.
    """

    app_id: int
    app_name: str
    number: int
    spec: dict[str, Any]
    env: dict[str, str]
    route: str

    @property
    def release_id(self) -> str:
        return f"{self.app_id}-{self.number}"


@dataclass(frozen=True, slots=True)
class Instance:
    release_id: str
    index: int
    upstream: str  # "127.0.0.1:port"


@dataclass(frozen=True, slots=True)
class Backend:
    release_id: str
    weight: int  # percent
    upstreams: tuple[str, ...]


class Runtime(Protocol):
    async def prepare(self, release: Release) -> None: ...
    async def start(self, release: Release, index: int) -> Instance: ...
    async def wait_healthy(self, release: Release, instance: Instance, within_s: float) -> bool: ...
    async def stop(self, release_id: str, index: int | None = None) -> None: ...
    async def running(self, release_id: str) -> list[Instance]: ...
    async def adopt(self, release: Release) -> list[Instance]: ...
    async def crash_looping(self, release_id: str) -> bool: ...


class Router(Protocol):
    """Traffic by route key (a :class:`Release`'s ``route``), one app per key."""

    def route(self, route: str, backends: list[Backend]) -> None: ...
    def unroute(self, route: str) -> None: ...
    def mark(self, route: str, release_id: str) -> None: ...
    def window(self, route: str, release_id: str) -> tuple[int, int]:
        """Requests and 5xx answers for the release since its last :meth:`mark`."""
        ...
