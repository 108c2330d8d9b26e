"""The storage series: statements and Redis commands timed, pools read at scrape time, the
replica heartbeat counted, leases held counted by kind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from appdeck.events.bus import InProcessBus
from appdeck.observability import storage as metrics
from appdeck.observability.timed_redis import TimedRedis
from appdeck.platform.deploy.locks import AppLocks
from appdeck.storage import Storage
from appdeck.storage.app_locks import AppLockStore
from appdeck.storage.engine import create_engine, default_sqlite_url
from appdeck.storage.replicas import ReplicaStore
from appdeck.transport.hub import GET_STREAM, StreamHub
from tests.support.redis import POOL_SIZE, connect
from tests.support.wait import until


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_every_statement_is_timed_under_its_backend(storage: Storage) -> None:
    backend = storage.engine.dialect.name
    metrics.watch_database(storage.engine)
    metrics.watch_database(storage.engine)  # twice: still one observation per statement
    before = value("appdeck_db_query_seconds_count", backend=backend)
    total = value("appdeck_db_query_seconds_sum", backend=backend)
    async with storage.engine.connect() as conn:
        for n in range(5):
            assert await conn.scalar(sa.select(sa.literal(n))) == n
    assert value("appdeck_db_query_seconds_count", backend=backend) == before + 5
    assert value("appdeck_db_query_seconds_sum", backend=backend) > total
    assert value("appdeck_db_query_seconds_bucket", backend=backend, le="+Inf") == before + 5


async def test_the_pool_is_read_at_scrape_time(storage: Storage) -> None:
    metrics.watch_database(storage.engine)
    async with storage.engine.connect() as conn:
        await conn.scalar(sa.select(sa.literal(1)))
        assert value("appdeck_db_pool_connections", state="checked_out") == 1
        async with storage.engine.connect() as other:
            await other.scalar(sa.select(sa.literal(2)))
            assert value("appdeck_db_pool_connections", state="checked_out") == 2
    assert value("appdeck_db_pool_connections", state="checked_out") == 0
    assert value("appdeck_db_pool_connections", state="idle") >= 1
    if storage.engine.dialect.name == "postgresql":  # storage.engine's configuration
        assert value("appdeck_db_pool_connections", state="size") == 10
        assert value("appdeck_db_pool_connections", state="max") == 20
    assert value("appdeck_db_pool_connections", state="overflow") >= 0


@pytest.fixture
async def timed(redis_prefix: str) -> AsyncIterator[Redis]:
    client = connect(cls=TimedRedis)
    metrics.watch_redis(client)
    yield client
    await client.aclose()


async def test_redis_commands_and_pipelines_are_timed_one_round_trip_each(
    timed: Redis, redis_prefix: str
) -> None:
    before = value("appdeck_redis_command_seconds_count")
    await timed.ping()
    await timed.set(f"{redis_prefix}:a", "1")
    async with timed.pipeline(transaction=False) as pipe:
        pipe.incr(f"{redis_prefix}:a")
        pipe.incr(f"{redis_prefix}:a")
        assert await pipe.execute() == [2, 3]
    script = timed.register_script("return redis.call('GET', KEYS[1])")
    assert await script([f"{redis_prefix}:a"]) == b"3"  # EVALSHA (after a NOSCRIPT: EVAL)
    assert value("appdeck_redis_command_seconds_count") >= before + 4


async def test_the_redis_pool_shows_a_connection_in_use_while_a_command_waits(
    timed: Redis, redis_prefix: str
) -> None:
    await timed.ping()
    assert value("appdeck_redis_pool_connections", state="max") == POOL_SIZE
    assert value("appdeck_redis_pool_connections", state="in_use") == 0
    key = f"{redis_prefix}:queue"
    waiting = asyncio.create_task(timed.blpop([key], timeout=10))
    try:
        await until(lambda: value("appdeck_redis_pool_connections", state="in_use") >= 1)
        async with connect() as pusher:
            await pusher.rpush(key, "x")
        async with asyncio.timeout(15):
            assert await waiting == (key.encode(), b"x")
    finally:
        waiting.cancel()
    assert value("appdeck_redis_pool_connections", state="in_use") == 0
    assert value("appdeck_redis_pool_connections", state="available") >= 1


async def test_heartbeats_are_counted_and_the_live_replicas_seen(
    storage: Storage, tmp_path: Path
) -> None:
    first = ReplicaStore(storage.engine, "replica-a", interval=0.05)
    metrics.watch_replicas(first)
    ok = value("appdeck_replica_heartbeats_total", outcome="ok")
    stopping = asyncio.Event()
    beating = asyncio.create_task(first.beat_forever(stopping))
    try:
        await until(lambda: value("appdeck_replica_heartbeats_total", outcome="ok") >= ok + 3)
        assert value("appdeck_replica_peers") == 1
        await ReplicaStore(storage.engine, "replica-b").heartbeat()
        await until(lambda: value("appdeck_replica_peers") >= 2)
    finally:
        stopping.set()
        async with asyncio.timeout(15):
            await beating
    assert value("appdeck_replica_heartbeats_total", outcome="failed") == 0


async def test_a_heartbeat_that_cannot_reach_the_database_counts_as_failed(
    tmp_path: Path,
) -> None:
    engine = create_engine(default_sqlite_url(tmp_path))  # no schema: the write fails
    try:
        store = ReplicaStore(engine, "replica-x", interval=0.05)
        metrics.watch_replicas(store)
        stopping = asyncio.Event()
        beating = asyncio.create_task(store.beat_forever(stopping))
        try:
            await until(lambda: value("appdeck_replica_heartbeats_total", outcome="failed") >= 2)
        finally:
            stopping.set()
            async with asyncio.timeout(15):
                await beating
        assert value("appdeck_replica_heartbeats_total", outcome="ok") == 0
    finally:
        await engine.dispose()


async def test_app_and_stream_leases_held_are_counted_until_released(storage: Storage) -> None:
    locks = AppLocks(AppLockStore(storage.engine), "replica-a")
    hub = StreamHub(storage.events, InProcessBus())
    metrics.count_leases("app", locks.held)
    metrics.count_leases("stream", lambda: hub.leases_held)
    assert value("appdeck_leases_held", kind="app") == 0
    first = await locks.try_take(1)
    second = await locks.try_take(2)
    assert first is not None
    assert second is not None
    assert await locks.try_take(1) is None  # held: not counted twice
    stream = await hub.claim("session-1", GET_STREAM)
    assert stream is not None
    assert value("appdeck_leases_held", kind="app") == 2
    assert value("appdeck_leases_held", kind="stream") == 1
    await first.release()
    await hub.release("session-1", GET_STREAM, stream)
    assert value("appdeck_leases_held", kind="app") == 1
    assert value("appdeck_leases_held", kind="stream") == 0
    second.lost = True  # taken over by another replica: no longer ours
    assert value("appdeck_leases_held", kind="app") == 0
    await second.release()
    assert value("appdeck_leases_held", kind="push") >= 0  # every kind is there


def test_an_unknown_lease_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown lease kind"):
        metrics.count_leases("made-up", lambda: 1)
