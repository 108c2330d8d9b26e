"""The deploy engine's Router port on the ingress router's route table and counters.

Everything is keyed by route key (an app's is ``<app>--<tenant>``, from
:mod:`appdeck.model.hostnames`), so two tenants' apps of one name never touch each other's
route, counters or canary marks.

Several replicas (:meth:`IngressRouter.share`): every replica's ingress serves every route.
A route change made here is published on the ``routes`` channel as the route's whole new
state (its backends, or ``null`` once forgotten), by one sender task, in order; the other
replicas apply it to their tables as it comes. Pub/sub loses messages (a dropped connection):
the backstop is ``DeployEngine.resync_routes`` (the database's live releases), run after a
reconnect and every few seconds.

A canary is analysed by the replica that deploys it, but every replica's ingress answers its
share of the traffic: with Redis, each replica adds what the releases of a split route
answered to ``<prefix>:canary:<route>:<release>`` (HINCRBY of the deltas, every
``COUNTS_EVERY_S``), and :meth:`IngressRouter.window` reads the cluster's totals since the
mark (falling back to this replica's own counters while Redis is away).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from appdeck.ingress import routes as ingress
from appdeck.ingress.keys import KeyGate
from appdeck.platform.deploy.ports import Backend

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("appdeck.ingress")

CHANNEL: Final = "routes"
MAX_MESSAGE: Final = 64 * 1024
"""A route message larger than this is dropped unread (a route is a few hundred bytes)."""
MAX_BACKENDS: Final = 16
MAX_UPSTREAMS: Final = 256
MAX_PENDING: Final = 4096
"""Routes changed here and not yet published; beyond, the oldest change is dropped (the
other replicas' backstop reload repairs it)."""
COUNTS_EVERY_S: Final = 0.5
"""How often the canary counters go to (and come back from) Redis."""
COUNTS_TTL_MS: Final = 3_600_000
MAX_WATCHED: Final = 256
MAX_PUSHED: Final = 4096
PUBLISHED_WITHIN_S: Final = 2.0
"""How long :meth:`IngressRouter.published` waits for the sender (a stalled Redis must not
stall a deploy)."""


class Broadcast(Protocol):
    """Messages between replicas: the shape of ``appdeck.protocol.ports.Broadcast`` (which
    the platform may not import); ``appdeck.events.signals`` implements it."""

    async def publish(self, channel: str, payload: bytes) -> None: ...

    async def subscribe(self, channel: str, handler: Callable[[bytes], None]) -> Any: ...

    async def unsubscribe(self, subscription: Any) -> None: ...

    def on_reconnect(self, callback: Callable[[], None]) -> None: ...


def encode(
    origin: str, route: str, backends: list[ingress.Backend] | None, seq: int | None = None
) -> bytes:
    """A route message: the route's whole state (``null``: forgotten, 404); ``seq`` numbers
    the sender's messages (it waits for its own to come back, see ``published``)."""
    body = (
        None
        if backends is None
        else [[b.release_id, b.weight, list(b.upstreams)] for b in backends]
    )
    message: dict[str, Any] = {"o": origin, "r": route, "b": body}
    if seq is not None:
        message["s"] = seq
    return json.dumps(message, separators=(",", ":")).encode()


def _seq(payload: bytes) -> int:
    """The ``seq`` of one of this replica's own route messages (0 when it has none)."""
    seq = json.loads(payload).get("s")
    return seq if isinstance(seq, int) else 0


def decode(payload: bytes) -> tuple[str, str, list[ingress.Backend] | None]:
    """(origin, route, backends or None); ``ValueError`` for anything malformed."""
    if not isinstance(payload, bytes | bytearray) or len(payload) > MAX_MESSAGE:
        raise ValueError("not a route message (type or size)")
    data = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    origin, route, body = data.get("o"), data.get("r"), data.get("b")
    if not isinstance(origin, str) or not 0 < len(origin) <= 200:
        raise ValueError("bad origin")
    if not isinstance(route, str) or not ingress.ROUTE_KEY.fullmatch(route):
        raise ValueError("bad route key")
    if body is None:
        return origin, route, None
    if not isinstance(body, list) or len(body) > MAX_BACKENDS:
        raise ValueError("bad backends")
    backends = []
    for item in body:
        if not (isinstance(item, list) and len(item) == 3):
            raise ValueError("bad backend")
        release_id, weight, upstreams = item
        if not isinstance(upstreams, list) or len(upstreams) > MAX_UPSTREAMS:
            raise ValueError("bad upstreams")
        backends.append(ingress.Backend(release_id, weight, tuple(upstreams)))  # validates
    total = sum(b.weight for b in backends)
    if total not in (0, 100) or len({b.release_id for b in backends}) != len(backends):
        raise ValueError("bad weights")
    return origin, route, backends


class IngressRouter:
    def __init__(
        self,
        table: ingress.RouteTable,
        counters: ingress.Counters,
        keys: KeyGate | None = None,
    ) -> None:
        self.table = table
        self.counters = counters
        self.keys = keys if keys is not None else KeyGate()
        """The API keys the ingress checks (shared with the proxy)."""
        self._marks: dict[tuple[str, str], ingress.Mark] = {}
        self._share: _Share | None = None
        self._counts: _SharedCounts | None = None

    # -- writers (published to the other replicas when shared) -------------------------------

    def route(self, route: str, backends: list[Backend]) -> None:
        self.apply(route, backends)
        self._changed(route)

    def unroute(self, route: str) -> None:
        """The app stays known (503 "no live release"), with no backend."""
        self.apply(route, [])
        self._changed(route)

    def forget(self, route: str) -> None:
        """The app is gone (404)."""
        self.apply(route, None)
        self._changed(route)

    def move(self, old: str, new: str) -> None:
        """The app's key changed (it was renamed): ``new`` serves what ``old`` did, ``old``
        is gone. Only these two keys change."""
        self.apply(new, self.table.get(old) or [])
        self._changed(new)
        self.forget(old)

    def apply(self, route: str, backends: Sequence[Backend | ingress.Backend] | None) -> None:
        """Set ``route`` in this replica's table only (``None``: forget it), unpublished:
        what another replica's message or the backstop reload says. The engine's backends
        become the ingress's, which refuse any upstream but loopback (the data plane's check)."""
        if backends is not None:
            self.table.set(route, [_ingress(b) for b in backends])
            return
        self.table.remove(route)
        self.counters.forget(route)
        for key in [k for k in self._marks if k[0] == route]:
            del self._marks[key]

    # -- readers ---------------------------------------------------------------------------

    def serving(self, route: str) -> frozenset[str] | None:
        """The releases ``route`` sends traffic to (weight > 0); ``None``: not routed."""
        found = self.table.get(route)
        return None if found is None else frozenset(b.release_id for b in found if b.weight)

    def routes(self) -> list[str]:
        """The route keys in this replica's table."""
        return self.table.keys()

    # -- several replicas ------------------------------------------------------------------

    async def share(
        self,
        broadcast: Broadcast,
        instance_id: str,
        *,
        missed: Callable[[], Awaitable[object]] | None = None,
        redis: Redis | None = None,
        prefix: str = "appdeck",
    ) -> None:
        """Publish this replica's route changes and apply the others'. ``missed`` (the
        backstop reload) runs after the broadcast reconnects (messages may have been lost).
        With ``redis``, canary counters are summed over the replicas (keys under
        ``prefix``)."""
        if self._share is None:
            self._share = _Share(self, broadcast, instance_id, missed)
            await self._share.start()
        if redis is not None and self._counts is None:
            self._counts = _SharedCounts(self, redis, prefix)
            self._counts.start()

    async def published(self) -> None:
        """Wait (bounded) until the route changes made so far are published: call it before
        stopping instances another replica may still route to."""
        if self._share is not None:
            await self._share.published()

    async def keys_published(self) -> None:
        """Wait (bounded) until this host's data plane checks keys as :attr:`keys` says now
        (the API-key service awaits it before reporting a key made or revoked): at once
        here, where nothing copies :attr:`keys` (the HAProxy router waits for its edge)."""

    async def edge_published(self) -> None:
        """Wait (bounded) until this host's data plane serves the custom domains' host map as
        it is now (the domains service awaits it before reporting a domain released or
        verified): at once here, where nothing copies the map (the HAProxy router waits for
        its edge)."""

    async def close(self) -> None:
        if self._share is not None:
            share, self._share = self._share, None
            await share.close()
        if self._counts is not None:
            counts, self._counts = self._counts, None
            await counts.close()

    def _changed(self, route: str) -> None:
        if self._share is not None:
            self._share.changed(route)

    def mark(self, route: str, release_id: str) -> None:
        self._marks[(route, release_id)] = self.counters.mark(route, release_id)
        if self._counts is not None:
            self._counts.mark(route, release_id)

    def window(self, route: str, release_id: str) -> tuple[int, int]:
        """Requests and 5xx answers of the release since its mark: over every replica's
        ingress when shared (whichever of that and this replica's own saw more)."""
        mark = self._marks.get((route, release_id))
        stats = self.counters.since(mark) if mark else self.counters.get(route, release_id)
        here = (stats.requests, stats.status_5xx)
        cluster = None if self._counts is None else self._counts.window(route, release_id)
        return cluster if cluster is not None and cluster[0] >= here[0] else here


class _Share:
    """The sender (one task: changes go out in order, each as the route's state when sent)
    and the receiver of route messages."""

    def __init__(
        self,
        router: IngressRouter,
        broadcast: Broadcast,
        instance_id: str,
        missed: Callable[[], Awaitable[object]] | None,
    ) -> None:
        self._router = router
        self._broadcast = broadcast
        self._me = instance_id
        self._missed = missed
        self._pending: dict[str, None] = {}
        self._sent = 0
        """Route messages published so far (each carries its number)."""
        self._echoed = 0
        self._echo = asyncio.Event()
        """Set when one of our own messages came back (the others have it too)."""
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._sender: asyncio.Task[None] | None = None
        self._subscription: Any = None
        self._aside: set[asyncio.Task[object]] = set()

    async def start(self) -> None:
        self._subscription = await self._broadcast.subscribe(CHANNEL, self._receive)
        self._broadcast.on_reconnect(self._reconnected)
        self._sender = asyncio.create_task(self._send(), name="appdeck-routes-sender")

    async def close(self) -> None:
        sender, self._sender = self._sender, None  # closed: a later reconnect reloads nothing
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._broadcast.unsubscribe(self._subscription)
        for task in list(self._aside):
            task.cancel()

    def changed(self, route: str) -> None:
        self._pending.pop(route, None)  # goes to the back: sent after the earlier changes
        if len(self._pending) >= MAX_PENDING:
            dropped = next(iter(self._pending))
            del self._pending[dropped]
            log.warning("route changes pile up; %s is left to the backstop reload", dropped)
        self._pending[route] = None
        self._idle.clear()
        self._wake.set()

    async def published(self) -> None:
        """Until the changes made so far were published *and* came back to this replica
        through the broadcast: the broadcast hands a message to every subscriber at once, so
        the other replicas have it too (bounded: a stalled Redis must not stall a deploy)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PUBLISHED_WITHIN_S):
                await self._idle.wait()
                sent = self._sent
                while self._echoed < sent:
                    self._echo.clear()
                    await self._echo.wait()

    async def _send(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                route = next(iter(self._pending))
                del self._pending[route]
                found = self._router.table.get(route)
                payload = encode(self._me, route, found, self._sent + 1)
                try:
                    await self._broadcast.publish(CHANNEL, payload)
                except Exception:  # Redis away: the others' backstop reload catches up
                    log.exception("could not publish the route of %s", route)
                else:
                    self._sent += 1
            self._idle.set()

    def _receive(self, payload: bytes) -> None:
        try:
            origin, route, backends = decode(payload)
        except (ValueError, TypeError, RecursionError) as exc:
            log.warning("dropped a malformed route message: %.200s", exc)
            return
        if origin == self._me:
            self._echoed = max(self._echoed, _seq(payload))
            self._echo.set()
            return
        self._router.apply(route, backends)

    def _reconnected(self) -> None:
        if self._missed is None or self._sender is None:
            return
        task: asyncio.Task[object] = asyncio.ensure_future(self._missed())
        self._aside.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[object]) -> None:
        self._aside.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("reloading the routes after a reconnect failed: %r", task.exception())


def _count(value: object) -> int:
    """A counter read back from Redis; anything else counts 0."""
    if isinstance(value, bytes) and 0 < len(value) <= 19 and value.isdigit():
        return int(value)
    return 0


class _SharedCounts:
    """Canary counters summed over the replicas in Redis (see the module docs)."""

    def __init__(self, router: IngressRouter, redis: Redis, prefix: str) -> None:
        self._router = router
        self._redis = redis
        self._prefix = prefix
        self._pushed: dict[tuple[str, str], tuple[int, int, int]] = {}
        """(route, release) -> (counter epoch, requests, 5xx) as last added to Redis."""
        self._marks: dict[tuple[str, str], tuple[int, int] | None] = {}
        """(route, release) marked here -> the cluster's totals then (None: not read yet)."""
        self._totals: dict[tuple[str, str], tuple[int, int]] = {}
        self._task: asyncio.Task[None] | None = None

    def key(self, route: str, release_id: str) -> str:
        return f"{self._prefix}:canary:{route}:{release_id}"

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="appdeck-canary-counts")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def mark(self, route: str, release_id: str) -> None:
        key = (route, release_id)
        self._marks.pop(key, None)
        while len(self._marks) >= MAX_WATCHED:
            self._marks.pop(next(iter(self._marks)))
        self._marks[key] = self._totals.get(key)

    def window(self, route: str, release_id: str) -> tuple[int, int] | None:
        key = (route, release_id)
        base, now = self._marks.get(key), self._totals.get(key)
        if base is None or now is None:
            return None
        return max(0, now[0] - base[0]), max(0, now[1] - base[1])

    async def _run(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(COUNTS_EVERY_S)
            try:
                await self.tick()
                failing = False
            except Exception:  # Redis away: the analysis uses this replica's own counters
                if not failing:
                    log.exception("canary counters: Redis failed; counting here only")
                failing = True
                self._totals.clear()  # stale totals must not stand for the cluster's

    async def tick(self) -> None:
        """Add what this replica's ingress answered since the last tick, then read the
        totals of the releases marked here."""
        router = self._router
        pipe = self._redis.pipeline(transaction=False)
        writes = 0
        for route in router.table.split():
            for release, cell in router.counters.cells(route):
                stats = cell.stats()
                epoch, requests, errors = self._pushed.pop((route, release), (cell.epoch, 0, 0))
                if epoch != cell.epoch:  # reset here: its counts start over
                    requests, errors = 0, 0
                more, worse = stats.requests - requests, stats.status_5xx - errors
                if more > 0 or worse > 0:
                    name = self.key(route, release)
                    pipe.hincrby(name, "r", max(0, more))
                    pipe.hincrby(name, "e", max(0, worse))
                    pipe.pexpire(name, COUNTS_TTL_MS)
                    writes += 1
                self._pushed[(route, release)] = (cell.epoch, stats.requests, stats.status_5xx)
        while len(self._pushed) > MAX_PUSHED:
            self._pushed.pop(next(iter(self._pushed)))
        if writes:
            await pipe.execute()
        watched = list(self._marks)
        if not watched:
            self._totals.clear()
            return
        pipe = self._redis.pipeline(transaction=False)
        for route, release in watched:
            pipe.hmget(self.key(route, release), ["r", "e"])
        rows = await pipe.execute()
        totals = {}
        for key, row in zip(watched, rows, strict=True):
            pair = (0, 0)
            if isinstance(row, list) and len(row) == 2:
                pair = (_count(row[0]), _count(row[1]))
            totals[key] = pair
            if key in self._marks and self._marks[key] is None:
                self._marks[key] = pair  # the baseline: read after the mark
        self._totals = totals


def _ingress(backend: Backend | ingress.Backend) -> ingress.Backend:
    """The ingress's backend for the engine's (checked: ``[<netns>@]127.0.0.1:<port>`` only)."""
    if isinstance(backend, ingress.Backend):
        return backend
    return ingress.Backend(backend.release_id, backend.weight, tuple(backend.upstreams))
