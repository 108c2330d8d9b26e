"""Which release answers a Host, and how each release is doing.

:class:`RouteTable` maps a route key to its backends (one per release that may take traffic,
with a weight); :meth:`RouteTable.resolve` turns a ``Host`` header into an upstream address by
weight (canaries) and round robin (instances). :class:`Counters` counts what each release
answered, for canary analysis.

A route key is the first DNS label of the host, and an app's key is the one
:mod:`appdeck.model.hostnames` gives it (``<app>--<tenant>``): never the bare app name,
which is unique only within a tenant. The table itself treats keys as opaque labels.

Both are plain synchronous objects: every method runs to completion without awaiting, so on
one event loop they are atomic. Writers may also call from another thread: a route change
builds a new immutable route and swaps it in under a lock, and readers never lock.
"""

from __future__ import annotations

import random
import re
import threading
import time
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from appdeck.ingress.hosts import HostMap

ROUTE_KEY = re.compile(r"[a-z0-9-]{1,63}")
"""A route key: one DNS label (see :mod:`appdeck.model.hostnames` for an app's)."""
_ROUTE_KEY_BYTES = re.compile(rb"[a-z0-9-]{1,63}")
_DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_UPSTREAM = re.compile(r"(?:[A-Za-z0-9._-]{1,64}@)?127\.0\.0\.1:([1-9][0-9]{0,4})")
_RELEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
UPSTREAM_HOST = "127.0.0.1"
"""The only address the ingress ever forwards to: apps listen on loopback — the host's, or,
for a sandboxed instance, the loopback of its own network namespace, written
``"<netns>@127.0.0.1:<port>"`` (``<netns>`` names the instance's namespace to the proxy's
``netns`` lookup)."""

_HOST_CACHE_SIZE = 4096

STOPPED = "stopped"
"""The release id of the marker backend (weight 0, no upstreams) a stopped app is routed to:
its host answers 503 "stopped" rather than 404 or "no live release". Real release ids are
``<app id>-<number>``, so no release can be mistaken for it; the marker travels between
replicas like any backend."""


@dataclass(frozen=True, slots=True)
class Backend:
    """One release that may take an app's traffic.

    ``weight`` is its share of requests in percent (0..100; 0 keeps it routable for nothing,
    e.g. the old set of a blue/green switch, kept warm). ``upstreams`` are its instances,
    ``"127.0.0.1:<port>"`` or ``"<netns>@127.0.0.1:<port>"`` each, used round robin. A list
    is accepted and kept as a tuple.
    """

    release_id: str
    weight: int
    upstreams: Sequence[str] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.release_id, str) or not _RELEASE_ID.fullmatch(self.release_id):
            raise ValueError(f"invalid release id {self.release_id!r}")
        if type(self.weight) is not int or not 0 <= self.weight <= 100:
            raise ValueError(f"release {self.release_id}: weight must be an int in 0..100")
        upstreams = tuple(self.upstreams)
        for upstream in upstreams:
            if not isinstance(upstream, str):
                raise ValueError(f"release {self.release_id}: upstream {upstream!r} is no str")
            match = _UPSTREAM.fullmatch(upstream)
            if match is None or int(match.group(1)) > 65535:
                raise ValueError(
                    f"release {self.release_id}: upstream {upstream!r} is not "
                    "[<netns>@]127.0.0.1:<port>"
                )
        if len(set(upstreams)) != len(upstreams):
            raise ValueError(f"release {self.release_id}: an upstream is listed twice")
        if self.weight > 0 and not upstreams:
            raise ValueError(f"release {self.release_id}: weight {self.weight} but no upstreams")
        object.__setattr__(self, "upstreams", upstreams)


class Resolved(NamedTuple):
    """Where one request goes: the route (the app's key), the release chosen by weight, its
    next instance (round robin), and the instance after it (``fallback``, tried once when
    ``upstream`` refuses the connection; ``None`` when the release has one instance)."""

    route: str
    backend: Backend
    upstream: str
    fallback: str | None


class _Route:
    """An app's backends, frozen; only the round-robin positions change."""

    __slots__ = ("backends", "cumulative", "live", "name", "positions", "served")

    def __init__(self, name: str, backends: tuple[Backend, ...], served: bool = False) -> None:
        self.name = name
        self.backends = backends
        self.live = tuple(b for b in backends if b.weight > 0)
        self.served = served or bool(self.live)
        """Has had a live release since this process routed it: only then is a request
        without one told 503; before, the app is as unknown to a stranger as no app."""
        total = 0
        cumulative = []
        for backend in self.live:
            total += backend.weight
            cumulative.append(total)
        self.cumulative = cumulative
        self.positions = [0] * len(self.live)


class RouteTable:
    """Route key → weighted backends, and ``Host`` header → upstream.

    A host is first looked up in ``hosts`` (custom domains their owners proved: an exact
    hostname → route key), then matches ``<key>.localhost`` or ``<key>.<domain>`` for each of
    ``extra_domains``;
    case-insensitive, with any ``:port`` and a trailing dot ignored. ``<key>`` is one DNS
    label, ``[a-z0-9-]{1,63}``: an app's is ``<app>--<tenant>``
    (:mod:`appdeck.model.hostnames`). ``rng`` chooses among canary backends (inject a seeded
    :class:`random.Random` in tests).
    """

    def __init__(
        self,
        *,
        extra_domains: Iterable[str] = (),
        rng: random.Random | None = None,
        hosts: HostMap | None = None,
    ) -> None:
        domains = ["localhost"]
        for domain in extra_domains:
            domain = domain.lower().strip(".")
            if not _DOMAIN.fullmatch(domain):
                raise ValueError(f"invalid base domain {domain!r}")
            if domain not in domains:
                domains.append(domain)
        self.domains: tuple[str, ...] = tuple(domains)
        self._suffixes = tuple(("." + d).encode() for d in domains)
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - load spreading, not secrets
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()
        self._names: dict[bytes, str | None] = {}
        self.hosts = hosts if hosts is not None else HostMap()
        self.hosts.on_change(self._forget_names)

    def _forget_names(self, _host: str) -> None:
        """A custom domain came or went: the ``Host`` → key cache starts over."""
        self._names = {}

    # --- writers -------------------------------------------------------------------------

    def set(self, route: str, backends: Sequence[Backend]) -> None:
        """Route ``route`` to ``backends``, replacing what it had; the next request sees it.

        Weights must sum to 100, or all be 0 (or the list be empty): the app exists but has
        no live release, and requests get a 503. Release ids must differ.
        """
        if not isinstance(route, str) or not ROUTE_KEY.fullmatch(route):
            raise ValueError(f"invalid route key {route!r}: want [a-z0-9-]{{1,63}}")
        frozen = tuple(backends)
        for backend in frozen:
            if not isinstance(backend, Backend):
                raise ValueError(f"{backend!r} is not a Backend")
        ids = [b.release_id for b in frozen]
        if len(set(ids)) != len(ids):
            raise ValueError(f"route {route}: a release is listed twice")
        total = sum(b.weight for b in frozen)
        if total not in (0, 100):
            raise ValueError(f"route {route}: weights sum to {total}, want 100 (or all 0)")
        with self._lock:
            before = self._routes.get(route)
            self._routes[route] = _Route(route, frozen, before is not None and before.served)

    def remove(self, route: str) -> None:
        """Forget ``route``: its host gets a 404 from now on. No error if unknown."""
        with self._lock:
            self._routes.pop(route, None)

    # --- readers -------------------------------------------------------------------------

    def get(self, route: str) -> list[Backend] | None:
        """The backends of ``route`` as last set, or ``None`` when it is not routed."""
        found = self._routes.get(route)
        return None if found is None else list(found.backends)

    def split(self) -> list[str]:
        """The routes whose traffic is split between releases now (a canary or a rolling
        deploy under way): the ones whose counters other replicas may be analysing."""
        return [name for name, route in list(self._routes.items()) if len(route.live) > 1]

    def has_served(self, route: str) -> bool:
        """Whether ``route`` has had a live release since it was routed (see ``_Route``)."""
        found = self._routes.get(route)
        return found is not None and found.served

    def stopped(self, route: str) -> bool:
        """Whether ``route``'s app was stopped by its operator (routed to :data:`STOPPED`)."""
        found = self._routes.get(route)
        return found is not None and any(b.release_id == STOPPED for b in found.backends)

    def keys(self) -> list[str]:
        """The routed keys, sorted."""
        return sorted(self._routes)

    def __contains__(self, route: object) -> bool:
        return route in self._routes

    def route_of(self, host_header: bytes) -> str | None:
        """The route key a ``Host`` header names (whether or not it is routed), or ``None``."""
        try:
            return self._names[host_header]
        except KeyError:
            pass
        names = self._names
        name = self._parse(host_header)
        if len(names) >= _HOST_CACHE_SIZE:
            names.clear()
        names[host_header] = name
        return name

    def _parse(self, host_header: bytes) -> str | None:
        host = host_header.strip().lower()
        if host.startswith(b"["):  # an IPv6 literal never names an app
            return None
        head, colon, port = host.rpartition(b":")
        if colon:
            if not port.isdigit():
                return None
            host = head
        host = host.removesuffix(b".")
        custom = self.hosts.get(host.decode("ascii", "replace"))
        if custom is not None:
            return custom
        for suffix in self._suffixes:
            if host.endswith(suffix):
                label = host[: -len(suffix)]
                if _ROUTE_KEY_BYTES.fullmatch(label):
                    return label.decode("ascii")
                return None
        return None

    def resolve(self, host_header: bytes) -> Resolved | None:
        """The upstream for a request with this ``Host``; ``None`` when the host names no
        route or the route has no live release (tell them apart with :meth:`route_of`
        and ``in``)."""
        name = self.route_of(host_header)
        if name is None:
            return None
        route = self._routes.get(name)
        if route is None:
            return None
        live = route.live
        if len(live) == 1:
            index = 0
        elif live:
            index = bisect_right(route.cumulative, self._rng.random() * 100.0)
        else:
            return None
        backend = live[index]
        upstreams = backend.upstreams
        count = len(upstreams)
        if count == 1:
            return Resolved(name, backend, upstreams[0], None)
        position = route.positions[index]
        route.positions[index] = (position + 1) % count
        return Resolved(name, backend, upstreams[position], upstreams[(position + 1) % count])


# --- counters ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReleaseStats:
    """What one release answered (through the ingress) over some span.

    ``requests`` counts responses by their status: ``status_2xx`` … ``status_5xx``. The 502
    and 504 the ingress generated itself (upstream refused, reset, timed out or answered
    garbage) are in ``status_5xx`` *and* ``upstream_errors``. ``aborted`` counts responses
    cut short after they had started (the upstream failed or the client left mid-body); they
    are counted once more here, not in ``requests``. ``latency_sum`` is the seconds from the
    request reaching the ingress to the response headers leaving it (so a long stream counts
    by its time to first byte).
    """

    requests: int = 0
    status_1xx: int = 0
    status_2xx: int = 0
    status_3xx: int = 0
    status_4xx: int = 0
    status_5xx: int = 0
    upstream_errors: int = 0
    aborted: int = 0
    latency_sum: float = 0.0
    seconds: float = 0.0
    """How long the span lasted: since the counters began (or were reset), or since the mark."""

    @property
    def error_rate(self) -> float:
        """5xx responses per request (0.0 when there were none)."""
        return self.status_5xx / self.requests if self.requests else 0.0

    @property
    def mean_latency(self) -> float:
        return self.latency_sum / self.requests if self.requests else 0.0


class ReleaseCounter:
    """The live counters of one (route, release); the proxy updates them in place."""

    __slots__ = ("aborted", "by_class", "epoch", "latency_sum", "started", "upstream_errors")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.started = time.monotonic()
        self.by_class = [0, 0, 0, 0, 0, 0]
        self.upstream_errors = 0
        self.aborted = 0
        self.latency_sum = 0.0

    def record(self, status: int, latency: float, upstream_error: bool = False) -> None:
        """One response: its status, and the seconds until its headers were sent."""
        self.by_class[status // 100 if 100 <= status < 600 else 5] += 1
        self.latency_sum += latency
        if upstream_error:
            self.upstream_errors += 1

    def stats(self) -> ReleaseStats:
        by_class = self.by_class
        return ReleaseStats(
            requests=sum(by_class),
            status_1xx=by_class[1],
            status_2xx=by_class[2],
            status_3xx=by_class[3],
            status_4xx=by_class[4],
            status_5xx=by_class[5],
            upstream_errors=self.upstream_errors,
            aborted=self.aborted,
            latency_sum=self.latency_sum,
            seconds=time.monotonic() - self.started,
        )


class RouteTotals:
    """What one route answered over all its releases (see :meth:`Counters.totals`):
    responses by class (``by_class[1]`` … ``by_class[5]``), upstream errors (inside the
    5xx), the seconds to response headers summed."""

    __slots__ = ("by_class", "latency_sum", "upstream_errors")

    def __init__(self) -> None:
        self.by_class = [0, 0, 0, 0, 0, 0]
        self.upstream_errors = 0
        self.latency_sum = 0.0

    @property
    def requests(self) -> int:
        return sum(self.by_class)

    @property
    def status_5xx(self) -> int:
        return self.by_class[5]

    def add(self, cell: ReleaseCounter) -> None:
        for code, count in enumerate(cell.by_class):
            self.by_class[code] += count
        self.upstream_errors += cell.upstream_errors
        self.latency_sum += cell.latency_sum


@dataclass(frozen=True, slots=True)
class Mark:
    """A point in one release's counters; :meth:`Counters.since` measures from it."""

    route: str
    release_id: str
    epoch: int
    at: float
    stats: ReleaseStats


class Counters:
    """Per-(route, release) response counters, for canary analysis and metrics.

    Keyed by route key (an app's, see :mod:`appdeck.model.hostnames`), like the route
    table: two tenants' apps of one name never share counters. ``snapshot(route)`` gives the
    totals; ``mark`` / ``since`` give a window (what a canary did since its step began);
    ``reset`` starts a release over.
    """

    def __init__(self) -> None:
        self._cells: dict[tuple[str, str], ReleaseCounter] = {}
        self._no_release: dict[str, int] = {}
        self._epoch = 0

    def counter(self, route: str, release_id: str) -> ReleaseCounter:
        """The live counter of (route, release), created on first use (the proxy's hot path)."""
        key = (route, release_id)
        cell = self._cells.get(key)
        if cell is None:
            self._epoch += 1
            cell = self._cells[key] = ReleaseCounter(self._epoch)
        return cell

    def record(
        self,
        route: str,
        release_id: str,
        status: int,
        latency: float,
        *,
        upstream_error: bool = False,
    ) -> None:
        self.counter(route, release_id).record(status, latency, upstream_error)

    def record_no_release(self, route: str) -> None:
        """A request for ``route`` answered 503 because no release was live."""
        self._no_release[route] = self._no_release.get(route, 0) + 1

    def no_release(self, route: str) -> int:
        """How many requests for ``route`` found no live release."""
        return self._no_release.get(route, 0)

    def cells(self, route: str) -> list[tuple[str, ReleaseCounter]]:
        """(release id, its live counter) for every release of ``route`` counted here."""
        return [
            (release, cell) for (key, release), cell in list(self._cells.items()) if key == route
        ]

    def totals(self) -> dict[str, RouteTotals]:
        """Every route's totals over its releases, in one pass over the counters (a metrics
        scrape or a health sample; not per route: that would be one pass per route)."""
        found: dict[str, RouteTotals] = {}
        for (route, _), cell in list(self._cells.items()):
            totals = found.get(route)
            if totals is None:
                totals = found[route] = RouteTotals()
            totals.add(cell)
        return found

    def snapshot(self, route: str) -> dict[str, ReleaseStats]:
        """Release id → its totals, for every release of ``route`` that was counted."""
        return {
            release: cell.stats()
            for (key, release), cell in list(self._cells.items())
            if key == route
        }

    def get(self, route: str, release_id: str) -> ReleaseStats:
        """The totals of one release (all zero if it never answered)."""
        cell = self._cells.get((route, release_id))
        return ReleaseStats() if cell is None else cell.stats()

    def reset(self, route: str, release_id: str) -> None:
        """Start the release's counters over (marks taken before now measure from here)."""
        self._epoch += 1
        self._cells[(route, release_id)] = ReleaseCounter(self._epoch)

    def forget(self, route: str) -> None:
        """Drop every counter of ``route`` (the app was deleted)."""
        for key in [k for k in self._cells if k[0] == route]:
            del self._cells[key]
        self._no_release.pop(route, None)

    def mark(self, route: str, release_id: str) -> Mark:
        """Remember where the release's counters stand now."""
        cell = self.counter(route, release_id)
        return Mark(route, release_id, cell.epoch, time.monotonic(), cell.stats())

    def since(self, mark: Mark) -> ReleaseStats:
        """What the release answered after ``mark`` (after its reset, if it was reset since)."""
        cell = self.counter(mark.route, mark.release_id)
        now = cell.stats()
        if cell.epoch != mark.epoch:
            return now
        base = mark.stats
        return ReleaseStats(
            requests=now.requests - base.requests,
            status_1xx=now.status_1xx - base.status_1xx,
            status_2xx=now.status_2xx - base.status_2xx,
            status_3xx=now.status_3xx - base.status_3xx,
            status_4xx=now.status_4xx - base.status_4xx,
            status_5xx=now.status_5xx - base.status_5xx,
            upstream_errors=now.upstream_errors - base.upstream_errors,
            aborted=now.aborted - base.aborted,
            latency_sum=now.latency_sum - base.latency_sum,
            seconds=time.monotonic() - mark.at,
        )
