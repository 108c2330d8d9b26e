"""The HAProxy data plane: the route table the platform writes, kept in effect in HAProxy.

    table, counters = HAProxyTable(), HAProxyCounters()
    plane = HAProxyDataPlane(table, counters, Layout(run_dir / "haproxy"), host=..., port=...)
    await plane.start()          # adopts a running HAProxy of this install, or starts one
    table.set("blog--acme", [...])
    await plane.synced()         # the change is in effect (read back from HAProxy)

One task (every :data:`TICK_S`, or at once after a change):

- **sync**: render the config from the table; when anything but weights changed, write it and
  reload (master-worker: seamless); else set the weights that differ through the runtime API,
  on one connection that asks first which config the worker runs (``show info``). HAProxy
  answers each ``set server ... weight`` (nothing when applied, the refusal else): only once
  every one was applied is the table's version counted as in effect. A table changed while
  the config is written (a set's next instance, held for a moment) is rendered again: one
  reload for a set's instances.
- **watchdog**: a dead HAProxy is started again with the last config (must-show 5: routes back
  within 2 s of a kill -9).
- **counters**: per-server ``show stat`` summed per (route, release) into
  :class:`HAProxyCounters`, plus what earlier workers counted (a reload starts a worker at 0).
  What an old worker answers after a poll and before it exits (requests in flight at a
  reload) is not counted. Latency: the requests new since the last poll times the
  server's mean time to response headers then (``qtime + ctime + rtime``).

At start the data plane holds its first sync (the table is still empty then) until
:meth:`HAProxyDataPlane.settle` (the platform restored its routes) or :data:`SETTLE_S`: an
adopted HAProxy keeps serving every app meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from appdeck.common.listen import ListenError
from appdeck.ingress.certs import Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.haproxy.config import HANDOFF_SERVER, Layout, Rendered, render
from appdeck.ingress.haproxy.listening import addresses, free_port, probe
from appdeck.ingress.haproxy.namespaces import Namespaces
from appdeck.ingress.haproxy.process import BINARY, HAProxyFailed, HAProxyProcess, description
from appdeck.ingress.haproxy.runtime_api import RuntimeApiError
from appdeck.ingress.haproxy.table import HAProxyTable
from appdeck.ingress.routes import Counters

__all__ = ["EdgeHook", "HAProxyCounters", "HAProxyDataPlane", "HAProxyTable", "free_port"]

log = logging.getLogger("appdeck.ingress.haproxy")

TICK_S: Final = 0.25
SWEEP_AFTER_S: Final = 0.5
"""How long after a render the namespace names it no longer wants are removed (unmounting
blocks the loop ~0.2 ms a name: not on the path of the route change that let them go)."""
MOVED_EVERY_S: Final = 1.0
"""How often the namespaces of routed sandboxed instances are checked for a restart."""
SETTLE_S: Final = 30.0
SYNCED_WITHIN_S: Final = 15.0
SET_GAP_S: Final = 0.06
"""How long after an instance was expected the reload that adds it waits for the release's
next one (a blue/green's start ~40 ms apart); never once every instance is expected (a
rolling deploy's first one waits in vain), never to a reload that changes a route."""
HOLD_AT_MOST_S: Final = 0.25
"""The longest a reload waits so (a set's instances expected one after another)."""
_CLASSES: Final = ("hrsp_1xx", "hrsp_2xx", "hrsp_3xx", "hrsp_4xx", "hrsp_5xx")


class EdgeHook(Protocol):
    """What the edge (custom domains, API keys, TLS; ``joined.py``) adds to the config, and
    what it needs around a (re)start of HAProxy."""

    def global_lines(self) -> Sequence[str]: ...

    def http_rules(self) -> Sequence[str]: ...

    def sections(
        self, route_lines: Sequence[str], backend_lines: Sequence[str]
    ) -> Sequence[str]: ...

    def prepare(self) -> None:
        """Create the files the config names (before HAProxy starts or reloads)."""

    async def restarted(self) -> None:
        """HAProxy was started again by the watchdog: re-apply the edge's state."""


class HAProxyCounters(Counters):
    """Counters loaded from HAProxy's per-server stats (see the module docs): requests by
    status class; the requests HAProxy could not get an answer for (``econ``, ``eresp``)
    count as 5xx and upstream errors; ``latency_sum`` is estimated (see ``_poll``)."""

    def load(
        self,
        totals: dict[tuple[str, str], list[int]],
        latency: dict[tuple[str, str], float] | None = None,
    ) -> None:
        """``totals``: (route, release) -> [1xx, 2xx, 3xx, 4xx, 5xx, upstream errors];
        ``latency``: (route, release) -> the seconds to response headers, summed."""
        for (route, release), row in totals.items():
            cell = self.counter(route, release)
            cell.by_class = [0, row[0], row[1], row[2], row[3], row[4] + row[5]]
            cell.upstream_errors = row[5]
            if latency is not None:
                cell.latency_sum = latency.get((route, release), 0.0)


class HAProxyDataPlane:
    def __init__(
        self,
        table: HAProxyTable,
        counters: HAProxyCounters,
        layout: Layout,
        *,
        host: str = "127.0.0.1",
        port: int = 8088,
        proxy: ProxyConfig | None = None,
        namespaces: Namespaces | None = None,
        edge: EdgeHook | None = None,
        binary: Path = BINARY,
    ) -> None:
        self.table = table
        self.counters = counters
        self.layout = layout
        self.host = host
        self.port = port
        self.proxy = proxy or ProxyConfig()
        self.namespaces = namespaces
        self.edge = edge
        self.certificates = Certificates()
        """Served by SNI once the edge mirrors them into HAProxy (``platform/tls`` writes)."""
        self.challenges = Challenges()
        """ACME HTTP-01 answers, mirrored into HAProxy by the edge (``platform/tls`` writes)."""
        self.hosts = table.hosts
        """Custom domains → route keys (the route table's: the domains service writes it, the
        edge mirrors it into HAProxy)."""
        self.process = HAProxyProcess(layout, binary=binary)
        self.restarts = 0
        """How often the watchdog started a dead HAProxy again."""
        self._applied: Rendered | None = None
        """What this process last confirmed HAProxy runs (None: unknown, apply it whole):
        the config it reloaded with, which may have more servers than the table needs now."""
        self._weights: dict[tuple[str, str], int] = {}
        """(backend, server) -> the weight last set and read back, over ``_applied``'s."""
        self._written: Rendered | None = None
        """The last config written: what the watchdog starts a dead HAProxy with."""
        self._in_effect = -1
        """The table's routes version HAProxy runs (read back)."""
        self._synced = -1
        """The table version (expected instances too) last put in effect."""
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        """Set with :attr:`_wake`; what a held reload (:meth:`_hold`) waits on."""
        self._progress = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()
        self._moved_checked = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._base: dict[tuple[str, str], list[int]] = {}
        """(backend, server) -> what the workers before this one counted."""
        self._last: dict[tuple[str, str], list[int]] = {}
        self._polled = 0.0
        """When the counters were last read (``show stat``: at most every :data:`TICK_S`)."""
        self._latency: dict[tuple[str, str], float] = {}
        """(backend, server) -> seconds to response headers, summed over every worker."""
        self._sweep_at: float | None = None
        """When the namespace names the last render no longer wanted are removed."""
        self._listening: tuple[int, str] | None = None
        """(port, the addresses HAProxy binds there): see :meth:`_listen_on`."""

    def url_for(self, route: str) -> str:
        return f"http://{route}.{self.table.domains[0]}:{self.port}"

    # -- life ------------------------------------------------------------------------------

    async def start(self) -> int:
        """Adopt this install's running HAProxy (left as it is until :meth:`settle`), or
        start one with the table as it is; the port. :class:`ListenError` when the running
        HAProxy listens on another port than this one's (0: take the running one's)."""
        if self._task is not None:
            raise RuntimeError("the data plane is already running")
        async with self.process.locked():  # replicas starting at once: one starts HAProxy
            running = self._running_port()
            if self.port == 0:  # one data plane per install: a running one keeps its port
                self.port = running or free_port(self.host)
            elif running is not None and running != self.port:
                # a reload with this port would take the other replicas' port away
                raise ListenError(
                    f"port {self.port} is not where this host's data plane listens: the "
                    f"HAProxy every replica shares is on port {running}",
                    port=self.port,
                )
            self._loop = asyncio.get_running_loop()
            self.table.listener = self._poke
            if self.process.running():
                log.info("adopted the running HAProxy (%s)", self.layout.directory)
            else:
                probe(self.host, self.port)  # a taken port: one line, not HAProxy's log
                await self._sync(force=True, locked=True)
                self._settled.set()
        self._task = asyncio.create_task(self._run(), name="appdeck-haproxy")
        return self.port

    def _running_port(self) -> int | None:
        if not self.process.running():
            return None
        with contextlib.suppress(OSError, ValueError):
            for line in self.layout.config.read_text().splitlines():
                if line.strip().startswith("bind ") and line.startswith("    bind "):
                    return int(line.rsplit(":", 1)[1].split()[0])
        return None

    @property
    def settled(self) -> bool:
        """Whether route changes are pushed to HAProxy (see :meth:`settle`)."""
        return self._settled.is_set()

    def settle(self) -> None:
        """The table holds every route now (the platform restored them): sync from here on."""
        self._settled.set()
        self._poke()

    async def stop(self, *, haproxy: bool = False) -> None:
        """Stop driving HAProxy; stop HAProxy too when ``haproxy`` (tests, ``appdeck serve
        --stop-apps-on-exit``): else it keeps serving for the next start to adopt."""
        self.table.listener = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if haproxy:
            async with self.process.locked():
                await self.process.stop()
            if self.namespaces is not None:
                self.namespaces.clear()

    async def synced(self, within_s: float = SYNCED_WITHIN_S) -> bool:
        """Wait (bounded) until HAProxy runs the table as it is now; whether it does. Before
        :meth:`settle` (the platform restoring its routes) nothing is pushed: False at once."""
        if not self._settled.is_set():
            return False
        wanted = self.table.routes_version
        self._poke()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                while self._in_effect < wanted:
                    self._progress.clear()
                    await self._progress.wait()
                return True
        return False

    def _poke(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._woken()
        else:  # a writer on another thread
            loop.call_soon_threadsafe(self._woken)

    def _woken(self) -> None:
        self._wake.set()
        self._changed.set()

    # -- the task --------------------------------------------------------------------------

    async def _run(self) -> None:
        started = time.monotonic()
        failing = False
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S):
                    await self._wake.wait()
            self._wake.clear()
            if not self._settled.is_set() and time.monotonic() - started > SETTLE_S:
                self._settled.set()
            try:
                if not self.process.running() and self._written is not None:
                    await self._restart()
                if self._settled.is_set() and (
                    self._synced < self.table.version or self._namespace_moved()
                ):
                    await self._sync()
                self._sweep_names()
                if time.monotonic() >= self._polled + TICK_S:  # not again after every change
                    await self._poll()
                failing = False
            except (HAProxyFailed, RuntimeApiError, OSError) as exc:
                if not failing:
                    log.error("the HAProxy data plane: %s", exc)
                failing = True
            except Exception:
                log.exception("the HAProxy data plane task failed a round")

    def _sweep_names(self) -> None:
        """Remove the namespace names no longer wanted, once :data:`SWEEP_AFTER_S` has passed
        since the render that let them go."""
        if self.namespaces is None or self._sweep_at is None:
            return
        if time.monotonic() >= self._sweep_at:
            self._sweep_at = None
            self.namespaces.sweep()

    def _namespace_moved(self) -> bool:
        """A routed sandboxed instance was restarted after a crash (a new namespace, so a
        new name to render): checked at most every :data:`MOVED_EVERY_S`."""
        now = time.monotonic()
        if self.namespaces is None or now - self._moved_checked < MOVED_EVERY_S:
            return False
        self._moved_checked = now
        return self.namespaces.moved()

    async def _restart(self) -> None:
        """The watchdog: HAProxy died; start it with the last config."""
        assert self._written is not None
        log.error("HAProxy is not running: starting it again with the last configuration")
        self._fold()
        async with self.process.locked():
            if not self.process.running():
                if self.edge is not None:
                    self.edge.prepare()
                await self.process.apply(self._written)
                self.restarts += 1
        if self.edge is not None:
            await self.edge.restarted()

    def _render(self) -> Rendered:
        keys: list[str] = []
        expected = self.table.expected()
        if self.namespaces is not None:  # an expected instance already gone: left out
            fd_of = self.namespaces.fd_of
            expected = {
                route: {
                    n: u for n, u in servers.items() if "@" not in u or fd_of(_key(u)) is not None
                }
                for route, servers in expected.items()
            }
        for route in list(self.table.keys()):
            for backend in self.table.get(route) or []:
                keys += [u.partition("@")[0] for u in backend.upstreams if "@" in u]
            upstreams = expected.get(route, {}).values()
            keys += [u.partition("@")[0] for u in upstreams if "@" in u]
        namer = None
        if self.namespaces is not None:
            self.namespaces.ensure(keys)
            namer = self.namespaces.name
            if self._sweep_at is None:
                self._sweep_at = time.monotonic() + SWEEP_AFTER_S
        return render(
            self.table,
            self.layout,
            host=self._listen_on(),
            port=self.port,
            proxy=self.proxy,
            namespace=namer,
            edge_rules=self.edge.http_rules() if self.edge is not None else (),
            edge_global=self.edge.global_lines() if self.edge is not None else (),
            edge_sections_of=self.edge.sections if self.edge is not None else None,
            expected=expected,
        )

    def _listen_on(self) -> str:
        """Where HAProxy listens: :func:`addresses` of the host and port (which probes the
        second loopback with a bind), worked out once per port."""
        if self._listening is None or self._listening[0] != self.port:
            self._listening = (self.port, ",".join(addresses(self.host, self.port)))
        return self._listening[1]

    async def _sync(self, *, force: bool = False, locked: bool = False) -> None:
        """Put the table in effect: by weights alone when the config HAProxy runs has every
        server the table needs (those it no longer needs go to weight 0 and stay until the
        next reload), else by writing the config and reloading. In effect once HAProxy
        answered every weight set (it answers each one: nothing when applied); the waiters
        (:meth:`synced`) go on then, while the files are written for the next reload."""
        taken = self._take()
        rendered = taken.rendered
        applied, self._applied = self._applied, None  # unknown until HAProxy answered
        async with contextlib.nullcontext() if locked else self.process.locked():
            fits = not force and applied is not None and rendered.fits_in(applied)
            wanted = None
            if fits and applied is not None:
                wanted = await self._reweigh(rendered, applied)
            if wanted is None:  # (a marker not ours: another replica reloaded)
                taken, wanted = await self._reload(taken)
                rendered = applied = taken.rendered
            self._written = rendered
            self._applied, self._weights = applied, wanted
            self._synced, self._in_effect = taken.version, taken.routes
            self._progress.set()
            if applied is not rendered:  # weights alone: a reload or restart takes this config
                # (its maps are the running config's, which fits_in compared: not written again)
                await asyncio.to_thread(self.process.write, rendered, config_only=True)

    def _take(self) -> _Taken:
        version, routes = self.table.version, self.table.routes_version
        return _Taken(self._render(), version, routes)

    async def _reweigh(
        self, rendered: Rendered, applied: Rendered
    ) -> dict[tuple[str, str], int] | None:
        """Set the weights ``rendered`` changes on HAProxy running ``applied``, on one
        connection that asks first which config the worker runs: the weights in effect, or
        None when it runs another (a replica reloaded meanwhile: a reload follows, and the
        weights just set there are set again after it)."""
        wanted = {key: rendered.weights.get(key, 0) for key in applied.weights}
        lines = [
            f"set server {backend}/{server} weight {weight}"
            for (backend, server), weight in wanted.items()
            if self._weights.get((backend, server)) != weight
        ]
        self.process.check_held()
        info, said = await self.process.stats.asked_then("show info", lines)
        if description(info) != applied.marker:
            return None
        if said:
            raise RuntimeApiError(f"{len(lines)} weights: {said[0].strip()[:300]}")
        return wanted

    async def _reload(self, taken: _Taken) -> tuple[_Taken, dict[tuple[str, str], int]]:
        """Reload HAProxy with ``taken`` (or start it) and set every weight: a worker found
        running it already (``apply`` says unchanged) may have had others set. A table that
        changed while the config was written so that it needs a reload too (a blue/green's second
        instance started ~40 ms after the first) is rendered again and taken by this reload:
        what it put in effect, and the weights set."""
        if self.process.running():
            await self._poll()
            self._fold()
        if self.edge is not None:
            self.edge.prepare()
        if self.table.version != taken.version:  # changed while the counters were read
            taken = self._take()

        async def newer(checked: Rendered) -> Rendered | None:
            nonlocal taken
            await self._hold(taken)
            if self.table.version == taken.version:
                return None
            fresh = self._take()
            if fresh.rendered.marker == checked.marker:  # weights alone: the next sync's
                return None  # (the same namespace names: they are in the marker)
            taken = fresh
            return fresh.rendered

        await self.process.apply(taken.rendered, newer=newer)
        wanted = dict(taken.rendered.weights)
        self.process.check_held()
        await self.process.stats.commands(
            [f"set server {backend}/{server} weight {w}" for (backend, server), w in wanted.items()]
        )
        return taken, wanted

    async def _hold(self, taken: _Taken) -> None:
        """Before a reload that changes no route (it adds expected instances): while a
        release has instances not expected yet, wait until its last one expected is
        :data:`SET_GAP_S` old, so that a set's next one is in this reload too; at once when
        a route changes meanwhile (bounded in all)."""
        if taken.routes != self._in_effect:
            return  # it moves traffic: never held
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(HOLD_AT_MOST_S):
                while self.table.routes_version == taken.routes:
                    left = self.table.set_starting() + SET_GAP_S - time.monotonic()
                    if left <= 0:
                        return
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(left):
                            await self._changed.wait()

    def _fold(self) -> None:
        """The running worker's counts become the base: the next one starts at 0."""
        for key, row in self._last.items():
            base = self._base.setdefault(key, [0] * 6)
            for i, value in enumerate(row):
                base[i] += value
        self._last = {}

    async def _poll(self) -> None:
        self._polled = time.monotonic()
        answer = await self.process.stats.command("show stat -1 4 -1")
        rows = csv.DictReader(io.StringIO(answer.lstrip("# ")))
        last: dict[tuple[str, str], list[int]] = {}
        for row in rows:
            backend, server = row.get("pxname") or "", row.get("svname") or ""
            if not backend.startswith(("be_", "bc_")) or server == HANDOFF_SERVER:
                continue  # only a route's servers (or its body-limited twin's) count
            counts = [_int(row.get(name)) for name in _CLASSES]
            counts.append(_int(row.get("econ")) + _int(row.get("eresp")))
            before = self._last.get((backend, server))
            new_worker = before is not None and any(
                n < o for n, o in zip(counts, before, strict=True)
            )
            if before is not None and new_worker:
                base = self._base.setdefault((backend, server), [0] * 6)  # a new worker (a
                for i, value in enumerate(before):  # reload by another replica, a restart)
                    base[i] += value
            fresh = sum(counts[:5]) - (sum(before[:5]) if before and not new_worker else 0)
            if fresh > 0:
                self._latency[(backend, server)] = self._latency.get(
                    (backend, server), 0.0
                ) + fresh * _to_headers(row)
            last[(backend, server)] = counts
        self._last = last
        totals: dict[tuple[str, str], list[int]] = {}
        latency: dict[tuple[str, str], float] = {}
        for key in {*self._base, *last}:
            route, release = key[0][3:], key[1].rpartition("-")[0]
            total = totals.setdefault((route, release), [0] * 6)
            for source in (self._base.get(key), last.get(key)):
                for i, value in enumerate(source or ()):
                    total[i] += value
            latency[(route, release)] = latency.get((route, release), 0.0) + self._latency.get(
                key, 0.0
            )
        self.counters.load(totals, latency)


@dataclass(frozen=True)
class _Taken:
    """The table rendered, with its versions then (what the render puts in effect)."""

    rendered: Rendered
    version: int
    routes: int


def _key(upstream: str) -> str:
    """The instance key of a namespaced upstream (``<release>.<index>@…``)."""
    return upstream.partition("@")[0]


def _to_headers(row: dict[str, str]) -> float:
    """A server's mean seconds from a request's arrival to its response headers: HAProxy's
    averages over its last 1024 requests of queue, connect and response time (``qtime``,
    ``ctime``, ``rtime``, ms). Requests answered between two polls count at the mean of when
    they were read: an estimate, exact for a steady release (what canary analysis compares)."""
    return sum(_int(row.get(name)) for name in ("qtime", "ctime", "rtime")) / 1000


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0
