"""The storage and replica series: database and Redis round trips, their pools, the replica
heartbeat and the leases this replica holds.

    appdeck_db_query_seconds{backend}          one statement's round trip (sqlite, postgresql)
    appdeck_db_pool_connections{state}         the pool now: checked_out, idle, size, overflow, max
    appdeck_redis_command_seconds              one Redis command or pipeline, as its caller
                                               waits for it (replica mode only)
    appdeck_redis_pool_connections{state}      the Redis pool now: in_use, available, max
                                               (replica mode only)
    appdeck_replica_heartbeats_total{outcome}  heartbeats written (ok) or not (failed)
    appdeck_replica_peers                      replicas alive at the last heartbeat, this one
                                               included (replica mode only)
    appdeck_leases_held{kind}                  leases this replica holds now: app (a deploy,
                                               rollback or restart's app lock), stream (an SSE
                                               stream's), push (a hosted push slot)

The composition root (:mod:`appdeck.assembly`) wires these onto the parts it builds: the
storage and events packages know nothing of metrics. Round trips are counted in plain Python
(:mod:`.latency`): a ``perf_counter`` pair and a list increment each (a statement through
SQLAlchemy's dialect events, :class:`_TimedExecute`). Everything else is read
when Prometheus scrapes, from the last engine, client, heartbeat and lease holders watched
(one of each per process in production).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from prometheus_client import REGISTRY
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import event
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import QueuePool

from appdeck.observability.latency import Latency, counter, gauge, histogram

if TYPE_CHECKING:  # loaded by replica mode only (appdeck.common.outages)
    from redis.asyncio import BlockingConnectionPool, Redis

DB_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)
REDIS_BUCKETS: Final = (
    0.0002,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    5,
)
BACKENDS: Final = ("sqlite", "postgresql")
DB_POOL_STATES: Final = ("checked_out", "idle", "size", "overflow", "max")
REDIS_POOL_STATES: Final = ("in_use", "available", "max")
HEARTBEAT_OUTCOMES: Final = ("ok", "failed")
LEASE_KINDS: Final = ("app", "stream", "push")

T = TypeVar("T")


class HeartbeatCounts(Protocol):
    """What :func:`watch_replicas` reads: a heartbeat's counts and the live replicas seen."""

    beats_ok: int
    beats_failed: int
    peers: int | None


class _Storage(Collector):
    def __init__(self) -> None:
        self.db = {backend: Latency(DB_BUCKETS) for backend in BACKENDS}
        self.redis = Latency(REDIS_BUCKETS)
        self.engine: weakref.ref[AsyncEngine] | None = None
        self.watched: weakref.WeakSet[Engine] = weakref.WeakSet()
        self.redis_pool: weakref.ref[BlockingConnectionPool] | None = None
        self.replicas: weakref.ref[HeartbeatCounts] | None = None
        self.leases: dict[str, Callable[[], int]] = {}

    def collect(self) -> Iterator[Metric]:
        yield histogram(
            "appdeck_db_query_seconds",
            "Database statements' round trips (cursor execute to its return), by backend",
            ["backend"],
            self.db,
        )
        yield gauge(
            "appdeck_db_pool_connections",
            "The database connection pool now, by state (checked_out, idle, size, overflow, max)",
            ["state"],
            _db_pool(_alive(self.engine)),
        )
        pool = _alive(self.redis_pool)
        if pool is not None:  # replica mode: Redis shared by the replicas
            yield histogram(
                "appdeck_redis_command_seconds",
                "Redis commands and pipelines as their caller waits for them (a pooled "
                "connection, then the round trip)",
                [],
                {None: self.redis},
            )
            yield gauge(
                "appdeck_redis_pool_connections",
                "The Redis connection pool now, by state (in_use, available, max)",
                ["state"],
                _redis_pool(pool),
            )
        counts = _alive(self.replicas)
        yield counter(
            "appdeck_replica_heartbeats",
            "Replica heartbeats written to the database (ok) or not (failed)",
            ["outcome"],
            {
                "ok": counts.beats_ok if counts else 0,
                "failed": counts.beats_failed if counts else 0,
            },
        )
        if counts is not None and counts.peers is not None:
            yield gauge(
                "appdeck_replica_peers",
                "Replicas alive (a fresh heartbeat) at this one's last heartbeat, itself included",
                [],
                {None: counts.peers},
            )
        yield gauge(
            "appdeck_leases_held",
            "Leases this replica holds now, by kind (app, stream, push)",
            ["kind"],
            {kind: _read(self.leases.get(kind)) for kind in LEASE_KINDS},
        )


STORAGE: Final = _Storage()


# -- the database ----------------------------------------------------------------------------


def watch_database(engine: AsyncEngine) -> None:
    """Time every statement ``engine`` runs, and read its pool at each scrape (the last
    engine watched in this process is the one whose pool is read)."""
    latency = STORAGE.db.get(engine.dialect.name)
    if latency is None:
        return
    sync = engine.sync_engine
    if sync not in STORAGE.watched:
        STORAGE.watched.add(sync)
        timed = _TimedExecute(sync.dialect, latency)
        event.listen(sync, "do_execute", timed.execute)
        event.listen(sync, "do_execute_no_params", timed.execute_no_params)
        event.listen(sync, "do_executemany", timed.executemany)
    STORAGE.engine = weakref.ref(engine)


class _TimedExecute:
    """The dialect's own execute, timed: SQLAlchemy's dialect events let a listener run the
    cursor call itself (returning True). Cheaper than the ``before``/``after_cursor_execute``
    pair, whose dispatch cost ~32,000 instructions per statement under callgrind (+30 % on an
    in-memory SQLite ``SELECT 1``; bench/RESULTS.md). A failed statement is timed too."""

    __slots__ = ("dialect", "latency")

    def __init__(self, dialect: Dialect, latency: Latency) -> None:
        self.dialect = dialect
        self.latency = latency

    def execute(self, cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
        started = time.perf_counter()
        try:
            self.dialect.do_execute(cursor, statement, parameters, context)
        finally:
            self.latency.observe(time.perf_counter() - started)
        return True

    def execute_no_params(self, cursor: Any, statement: str, context: Any) -> bool:
        started = time.perf_counter()
        try:
            self.dialect.do_execute_no_params(cursor, statement, context)
        finally:
            self.latency.observe(time.perf_counter() - started)
        return True

    def executemany(self, cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
        started = time.perf_counter()
        try:
            self.dialect.do_executemany(cursor, statement, parameters, context)
        finally:
            self.latency.observe(time.perf_counter() - started)
        return True


def _db_pool(engine: AsyncEngine | None) -> dict[str, float]:
    pool = engine.sync_engine.pool if engine is not None else None
    if not isinstance(pool, QueuePool):  # SQLAlchemy's async pools derive from it
        return dict.fromkeys(DB_POOL_STATES, 0)
    size = pool.size()
    return {
        "checked_out": pool.checkedout(),
        "idle": pool.checkedin(),
        "size": size,
        "overflow": max(0, pool.overflow()),  # negative while fewer than size are open
        "max": size + max(0, getattr(pool, "_max_overflow", 0)),
    }


# -- Redis -----------------------------------------------------------------------------------


def watch_redis(client: Redis) -> None:
    """Read ``client``'s pool at each scrape (replica mode); its commands are timed when it is
    a :class:`~appdeck.observability.timed_redis.TimedRedis`."""
    from redis.asyncio import BlockingConnectionPool

    pool = client.connection_pool
    if isinstance(pool, BlockingConnectionPool):
        STORAGE.redis_pool = weakref.ref(pool)


def _redis_pool(pool: BlockingConnectionPool) -> dict[str, float]:
    # redis-py exposes no counts: its two collections are read (len() of a set and a list)
    in_use = len(getattr(pool, "_in_use_connections", ()))
    available = len(getattr(pool, "_available_connections", ()))
    return {"in_use": in_use, "available": available, "max": pool.max_connections}


# -- replicas and leases ---------------------------------------------------------------------


def watch_replicas(counts: HeartbeatCounts) -> None:
    """Read the heartbeat's counts and live replicas from ``counts`` at each scrape (a
    :class:`~appdeck.storage.replicas.ReplicaStore`)."""
    STORAGE.replicas = weakref.ref(counts)


def count_leases(kind: str, held: Callable[[], int]) -> None:
    """Read how many leases of ``kind`` (one of :data:`LEASE_KINDS`) this replica holds from
    ``held`` at each scrape (the last one given per kind wins)."""
    if kind not in LEASE_KINDS:
        raise ValueError(f"unknown lease kind {kind!r}")
    STORAGE.leases[kind] = held


def _read(held: Callable[[], int] | None) -> int:
    return 0 if held is None else held()


def _alive(ref: weakref.ref[T] | None) -> T | None:
    return None if ref is None else ref()


REGISTRY.register(STORAGE)  # last: registering collects once, and every helper above is needed
