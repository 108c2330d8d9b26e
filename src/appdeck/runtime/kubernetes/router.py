"""The Gateway API router (issue 25 §2): the deploy engine's ``RouterPort`` on Kubernetes.

One HTTPRoute per app (:func:`.manifests.http_route`): its ``backendRefs`` are the releases'
Services and their ``weight`` the shares the engine gives (a canary's 10 → 50 → 100, a
blue/green switch with the old set kept at 0). :meth:`route` is synchronous, like the port: it
records the wanted backends and a per-route worker patches the HTTPRoute, newest wins (three
calls to :meth:`route` before the worker runs make one patch); :meth:`published` waits until
every wanted state is on the API server. ``RouterPort`` gains ``published()`` and ``apply()``
in another lane; this class has ``published()`` already.

**Writes.** The first write of a route is a POST (409: it exists, e.g. made by another replica:
it is read and patched). Every later one is a JSON merge patch that carries the
``resourceVersion`` last seen, so the API server refuses it (409 Conflict) when somebody else
changed the route in between: the route is read again and the patch retried, at most
:data:`ATTEMPTS` times. A merge patch replaces ``rules`` as a whole, so a backend dropped from
the list is dropped from the route. :meth:`unroute` deletes the route.

**Canary analysis.** :meth:`mark` and :meth:`window` are synchronous too: :meth:`mark` takes
the backend's counters as the baseline, :meth:`window` answers the counters since then, both
from the last reading of a :class:`BackendMetrics` (the gateway's per-backend request and 5xx
counts); :meth:`refresh` reads them, and with ``poll_s`` a task does it while a mark is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from appdeck.common.types import JsonObject
from appdeck.model.release import AppSpec, Release
from appdeck.runtime.kubernetes import names
from appdeck.runtime.kubernetes.api import MERGE_PATCH, KubeApi, KubeError, collection, path_of
from appdeck.runtime.kubernetes.limits import ClusterLimits
from appdeck.runtime.kubernetes.manifests import http_route

log = logging.getLogger("appdeck.runtime.kubernetes")

ATTEMPTS: Final = 3
"""Writes of one route state before giving up on 409s (another writer keeps winning)."""


class Backend(Protocol):
    """What the router reads of a route's backend: the ingress's
    :class:`~appdeck.ingress.routes.Backend` has it, and so does any share. Its ``upstreams``
    are not read: the gateway reaches the release's Service, whose name the release id gives.
    The engine hands :class:`appdeck.platform.deploy.ports.Backend`, which carries the driver's
    ``<service>.<namespace>.svc:80`` as it is (the ingress's own ``Backend``, behind the
    HAProxy data plane, still refuses anything but loopback).
    """

    @property
    def release_id(self) -> str: ...
    @property
    def weight(self) -> int: ...


class BackendMetrics(Protocol):
    """The gateway's counters for one backend (a release's Service): requests and 5xx answers
    since the gateway started, monotonic. A port, so that tests fake it."""

    async def counts(self, namespace: str, service: str) -> tuple[int, int]: ...


@dataclass
class _Route:
    wanted: Sequence[Backend] | None
    """None: unrouted (the route is deleted)."""
    dirty: bool = True
    """``wanted`` changed since the worker last took it."""
    version: str | None = None
    """The ``resourceVersion`` of the route as last written or read (None: not known)."""
    exists: bool = False
    worker: asyncio.Task[None] | None = None
    error: BaseException | None = None


@dataclass
class _Mark:
    namespace: str
    service: str
    baseline: tuple[int, int] | None = None
    latest: tuple[int, int] | None = None


@dataclass
class _Windows:
    marks: dict[tuple[str, str], _Mark] = field(default_factory=dict)
    poller: asyncio.Task[None] | None = None


class GatewayRouter:
    """Traffic by route key (``<app>--<tenant>``) as HTTPRoute weights."""

    def __init__(
        self,
        api: KubeApi,
        limits: ClusterLimits,
        metrics: BackendMetrics,
        *,
        poll_s: float = 0.0,
    ) -> None:
        self.api = api
        self.limits = limits
        self.metrics = metrics
        self.poll_s = poll_s
        self._routes: dict[str, _Route] = {}
        self._windows = _Windows()

    # -- RouterPort --------------------------------------------------------------------------
    def route(self, route: str, backends: Sequence[Backend]) -> None:
        """Make ``backends`` (release ids and weights in percent) the route's, soon: the
        HTTPRoute is patched by the route's worker (:meth:`published` waits for it)."""
        if not backends:
            raise ValueError("a route needs a backend; unroute() removes it")
        self._route_object(route, backends)  # refused here, not in the worker
        self._want(route, list(backends))

    def unroute(self, route: str) -> None:
        self._want(route, None)

    def mark(self, route: str, release_id: str) -> None:
        """Start the release's analysis window: its counters now are the baseline. The
        window ends with the route's next change (the metrics poller stops when none is
        open)."""
        release = _release(route, release_id)
        tenant = _split(route)[1]
        self._windows.marks[(route, release_id)] = _Mark(
            names.namespace(tenant, self.limits), names.release_name(release, tenant)
        )
        if self.poll_s > 0 and (self._windows.poller is None or self._windows.poller.done()):
            self._windows.poller = asyncio.get_running_loop().create_task(self._poll())

    def window(self, route: str, release_id: str) -> tuple[int, int]:
        """Requests and 5xx answers of the release since :meth:`mark`, as last read."""
        mark = self._windows.marks.get((route, release_id))
        if mark is None or mark.baseline is None or mark.latest is None:
            return (0, 0)
        return (
            max(0, mark.latest[0] - mark.baseline[0]),
            max(0, mark.latest[1] - mark.baseline[1]),
        )

    async def published(self) -> None:
        """Wait until every route's wanted state is written; raise the last write's error."""
        while True:
            workers = [r.worker for r in self._routes.values() if r.worker and not r.worker.done()]
            if not workers:
                break
            await asyncio.gather(*workers, return_exceptions=True)
        for state in self._routes.values():
            if state.error is not None:
                error, state.error = state.error, None
                raise error

    async def refresh(self) -> None:
        """Read the counters of every marked backend once."""
        for mark in list(self._windows.marks.values()):
            counts = await self.metrics.counts(mark.namespace, mark.service)
            if mark.baseline is None:
                mark.baseline = counts
            mark.latest = counts

    async def close(self) -> None:
        poller = self._windows.poller
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        await self.published()

    # -- the worker --------------------------------------------------------------------------
    def _want(self, route: str, backends: Sequence[Backend] | None) -> None:
        # a window runs from a mark to the route's next change (the canary marks after each)
        for key in [key for key in self._windows.marks if key[0] == route]:
            del self._windows.marks[key]
        state = self._routes.setdefault(route, _Route(wanted=backends))
        state.wanted, state.dirty = backends, True
        if state.worker is None or state.worker.done():
            state.worker = asyncio.get_running_loop().create_task(self._work(route, state))

    async def _work(self, route: str, state: _Route) -> None:
        while state.dirty:
            wanted, state.dirty = state.wanted, False
            try:
                if wanted is None:
                    await self._delete(route, state)
                else:
                    await self._write(route, state, wanted)
            except (KubeError, ValueError) as exc:
                log.warning("route %s not written: %s", route, exc)
                state.error = exc
                return

    async def _write(self, route: str, state: _Route, backends: Sequence[Backend]) -> None:
        obj = self._route_object(route, backends)
        path = path_of(obj)
        if not state.exists:
            try:
                answer = await self.api.call("POST", path.rsplit("/", 1)[0], body=obj)
                state.exists, state.version = True, _version(answer)
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise
                state.exists = True
                state.version = _version(await self.api.call("GET", path))
        for attempt in range(ATTEMPTS):
            body = {"metadata": {"labels": obj["metadata"]["labels"]}, "spec": obj["spec"]}
            if state.version is not None:
                body["metadata"]["resourceVersion"] = state.version
            try:
                answer = await self.api.call("PATCH", path, body=body, content_type=MERGE_PATCH)
            except KubeError as exc:
                if exc.status != 409 or attempt == ATTEMPTS - 1:
                    raise
                state.version = _version(await self.api.call("GET", path))
                continue
            state.version = _version(answer)
            return

    async def _delete(self, route: str, state: _Route) -> None:
        app, tenant = _split(route)
        path = f"{collection('HTTPRoute', names.namespace(tenant, self.limits))}/"
        path += names.app_name(app, tenant)
        try:
            await self.api.call("DELETE", path)
        except KubeError as exc:
            if exc.status != 404:
                raise
        state.exists, state.version = False, None

    def _route_object(self, route: str, backends: Sequence[Backend]) -> JsonObject:
        app, tenant = _split(route)
        return http_route(
            app,
            tenant,
            self.limits,
            [(_release(route, b.release_id), b.weight) for b in backends],
        )

    async def _poll(self) -> None:
        while self._windows.marks:
            try:
                await self.refresh()
            except Exception:  # a scrape that fails leaves the window as last read
                log.warning("backend metrics not read", exc_info=True)
            await asyncio.sleep(self.poll_s)


def _split(route: str) -> tuple[str, str]:
    """``<app>--<tenant>`` → (app, tenant); a tenant has no ``--``."""
    app, sep, tenant = route.rpartition("--")
    if not sep or not app or not tenant:
        raise ValueError(f"{route!r} is not a route key <app>--<tenant>")
    return app, tenant


def _release(route: str, release_id: str) -> Release:
    """The release a backend names, as far as its objects' names need (``<app_id>-<n>``)."""
    app_id, sep, number = release_id.partition("-")
    if not sep or not app_id.isdigit() or not number.isdigit():
        raise ValueError(f"{release_id!r} is not a release id <app_id>-<number>")
    return Release(int(app_id), _split(route)[0], int(number), AppSpec(), route=route)


def _version(answer: object) -> str | None:
    if not isinstance(answer, dict):
        return None
    version = (answer.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None
