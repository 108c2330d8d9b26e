"""The stream hub: per session, events reach the bus in seq order, even when the log commits
two appends out of order (what two PostgreSQL transactions may do); stream leases and
request streams across replicas (two hubs sharing real Redis)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from redis.asyncio import Redis

from appdeck.events.bus import CLOSE, Delivery, InProcessBus, Listener, RedisBus
from appdeck.events.leases import RedisLeases
from appdeck.events.ports import StoredEvent
from appdeck.events.redis_log import RedisEventLog
from appdeck.events.signals import RedisBroadcast
from appdeck.transport.hub import StreamHub
from appdeck.transport.sse import GET_STREAM


class SlowFirstLog:
    """A log that numbers an append when it starts (as the database's sequence does) and holds
    the first one until ``release`` is set, so a later append can finish first."""

    dense = False

    def __init__(self) -> None:
        self.numbers = itertools.count(1)
        self.release = asyncio.Event()
        self.first_started = asyncio.Event()

    async def append(self, session_id: str, stream: str, payload: bytes) -> StoredEvent:
        seq = next(self.numbers)
        if seq == 1:
            self.first_started.set()
            await self.release.wait()
        return StoredEvent(session_id, stream, seq, payload)

    async def append_many(self, items: Sequence[tuple[str, str, bytes]]) -> list[StoredEvent]:
        return [await self.append(*item) for item in items]

    async def replay(
        self, session_id: str, stream: str, after_seq: int, limit: int = 1000
    ) -> list[StoredEvent]:
        return []

    async def drop_session(self, session_id: str) -> None:
        return None

    async def tail(self, session_id: str, stream: str) -> int | None:
        return None

    async def open_stream(self, session_id: str, stream: str) -> None:
        return None

    async def closed(self, session_id: str) -> bool:
        return False

    async def trim(self, older_than: float) -> int:
        return 0


async def _delivered(listener: Listener, count: int) -> list[int]:
    seqs = []
    for _ in range(count):
        item = await listener.get(5)
        assert isinstance(item, Delivery)
        seqs.append(item.event.seq)
    return seqs


async def test_a_sessions_events_reach_the_bus_in_seq_order_when_appends_race() -> None:
    log = SlowFirstLog()
    hub = StreamHub(log, InProcessBus())
    reader = asyncio.create_task(_delivered(await hub.listen("s1"), 2))
    first = asyncio.create_task(hub.publish("s1", GET_STREAM, {"n": 1}))
    await asyncio.wait_for(log.first_started.wait(), 5)
    second = asyncio.create_task(hub.to_sessions(["s1"], {"n": 2}))
    await asyncio.sleep(0.01)  # without the hub's order, the second would be delivered now
    log.release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert await asyncio.wait_for(reader, 5) == [1, 2]


async def test_other_sessions_are_not_held_up_by_a_slow_append() -> None:
    log = SlowFirstLog()
    hub = StreamHub(log, InProcessBus())
    first = asyncio.create_task(hub.publish("slow", GET_STREAM, {"n": 1}))
    await asyncio.wait_for(log.first_started.wait(), 5)
    other = next(f"s{n}" for n in range(1000) if hash(f"s{n}") % 256 != hash("slow") % 256)
    event = await asyncio.wait_for(hub.publish(other, GET_STREAM, {"n": 2}), 5)
    assert event.seq == 2
    log.release.set()
    await asyncio.wait_for(first, 5)


class Replica:
    """The hub of one replica: its own broadcast, the shared Redis log and leases."""

    def __init__(self, redis: Redis, prefix: str, lease_ttl: float = 10.0) -> None:
        self.broadcast = RedisBroadcast(redis, prefix)
        self.hub = StreamHub(
            RedisEventLog(redis, prefix, retention_seconds=60),
            RedisBus(self.broadcast),
            RedisLeases(redis, prefix, ttl_seconds=lease_ttl),
        )

    async def __aenter__(self) -> StreamHub:
        await self.broadcast.start()
        return self.hub

    async def __aexit__(self, *exc: object) -> None:
        await self.broadcast.close()


async def test_the_standalone_stream_is_one_per_session_across_replicas(
    redis: Redis, redis_prefix: str
) -> None:
    async with Replica(redis, redis_prefix) as a, Replica(redis, redis_prefix) as c:
        lease = await c.claim("s1", GET_STREAM)
        assert lease is not None
        assert await a.claim("s1", GET_STREAM) is None
        assert await a.claim("s1", "req1") is not None  # a request stream is another lease
        await c.release("s1", GET_STREAM, lease)
        assert await a.claim("s1", GET_STREAM) is not None


async def test_a_holder_whose_lease_was_taken_is_told_so(redis: Redis, redis_prefix: str) -> None:
    async with Replica(redis, redis_prefix, lease_ttl=0.3) as c:
        lease = await c.claim("s1", GET_STREAM)
        assert lease is not None
        await redis.set(f"{redis_prefix}:lease:s1:{GET_STREAM}", "someone else")
        lost = asyncio.Event()
        async with asyncio.timeout(5):
            await c.keep(lease, lost.set)
        assert lost.is_set()


async def test_a_request_stream_opened_on_one_replica_is_known_on_another(
    redis: Redis, redis_prefix: str
) -> None:
    async with Replica(redis, redis_prefix) as a, Replica(redis, redis_prefix) as b:
        assert not await b.known_stream("s1", "abc")
        await a.open_request_stream("s1", "abc", resumable=True)
        assert await b.known_stream("s1", "abc")
        assert await b.tail("s1", "abc") == 0
        await a.open_request_stream("s1", "unprimed", resumable=False)
        assert await a.known_stream("s1", "unprimed")  # here, while it runs
        assert not await b.known_stream("s1", "unprimed")


async def test_a_new_stream_starts_at_its_sessions_tail_and_hears_what_comes_next(
    redis: Redis, redis_prefix: str
) -> None:
    async with Replica(redis, redis_prefix) as a, Replica(redis, redis_prefix) as c:
        for n in range(3):
            await a.to_session("s1", {"n": n})
        listener = await c.listen("s1")
        assert await c.tail("s1", GET_STREAM) == 3
        await a.to_sessions(["s1", "s2"], {"n": 3})
        async with asyncio.timeout(5):
            item = await listener.get(5)
        assert isinstance(item, Delivery)
        assert (item.event.seq, item.message) == (4, {"n": 3})
        await a.close_session("s1")
        async with asyncio.timeout(5):
            assert await listener.get(5) is CLOSE
        await c.unlisten(listener)
