"""RedisEventLog on real Redis: dense seqs whatever replica appends, replay, time trimming,
doorbells and dropped sessions."""

from __future__ import annotations

import asyncio

import orjson
from redis.asyncio import Redis

from appdeck.events.bus import CLOSE, RESYNC, Delivery, channel, decode_doorbell
from appdeck.events.ports import StoredEvent
from appdeck.events.redis_log import MAX_INLINE, RedisEventLog, _frames
from appdeck.events.signals import RedisBroadcast
from tests.support.redis import connect


def _log(redis: Redis, prefix: str, retention: float = 3600.0) -> RedisEventLog:
    return RedisEventLog(redis, prefix, retention_seconds=retention)


async def test_two_replicas_appending_at_once_get_one_dense_run_of_seqs(
    redis: Redis, redis_prefix: str
) -> None:
    other = connect()
    try:
        a, b = _log(redis, redis_prefix), _log(other, redis_prefix)

        async def append(log: RedisEventLog, n: int) -> StoredEvent:
            return await log.append("s1", "g", orjson.dumps({"n": n}))

        events = await asyncio.gather(*(append(a if n % 2 else b, n) for n in range(200)))
        assert sorted(e.seq for e in events) == list(range(1, 201))
        replayed = await a.replay("s1", "g", 0, limit=1000)
        assert [e.seq for e in replayed] == list(range(1, 201))
        by_seq = {e.seq: e.payload for e in events}
        assert all(by_seq[e.seq] == e.payload for e in replayed)
    finally:
        await other.aclose()


async def test_each_stream_of_a_session_counts_on_its_own(redis: Redis, redis_prefix: str) -> None:
    log = _log(redis, redis_prefix)
    first = await log.append("s1", "g", b"{}")
    request = await log.append("s1", "abc123", b"{}")
    other_session = await log.append("s2", "g", b"{}")
    second = await log.append("s1", "g", b"{}")
    assert [first.seq, request.seq, other_session.seq, second.seq] == [1, 1, 1, 2]


async def test_replay_starts_after_the_given_seq_and_stops_at_the_limit(
    redis: Redis, redis_prefix: str
) -> None:
    log = _log(redis, redis_prefix)
    events = await log.append_many([("s1", "g", f'{{"n":{n}}}'.encode()) for n in range(10)])
    assert [e.seq for e in events] == list(range(1, 11))
    assert await log.replay("s1", "g", 3, limit=4) == events[3:7]
    assert await log.replay("s1", "g", 10) == []
    assert await log.replay("s1", "other", 0) == []
    assert await log.replay("s2", "g", 0) == []


async def test_tail_knows_opened_and_written_streams_only(redis: Redis, redis_prefix: str) -> None:
    log = _log(redis, redis_prefix)
    assert await log.tail("s1", "req1") is None
    await log.open_stream("s1", "req1")
    assert await log.tail("s1", "req1") == 0
    await log.append("s1", "req1", b"{}")
    await log.append("s1", "req1", b"{}")
    await log.open_stream("s1", "req1")  # opening again resets nothing
    assert await log.tail("s1", "req1") == 2


async def test_events_older_than_the_retention_are_trimmed_by_time_not_by_count(
    redis: Redis, redis_prefix: str
) -> None:
    log = _log(redis, redis_prefix, retention=1.0)
    await log.append_many([("s1", "g", b'{"old":1}')] * 50)
    await asyncio.sleep(1.2)  # past the retention
    fresh = await log.append("s1", "g", b'{"new":1}')
    assert fresh.seq == 51
    assert await log.replay("s1", "g", 0) == [fresh]
    assert await log.tail("s1", "g") == 51
    ttl = await redis.pttl(f"{redis_prefix}:ev:{{s1}}:x:g")
    assert 0 < ttl <= 1000  # an idle stream's keys expire on their own


async def test_an_append_rings_the_sessions_doorbell_with_the_payload(
    redis: Redis, redis_prefix: str
) -> None:
    broadcast = RedisBroadcast(redis, redis_prefix)
    await broadcast.start()
    rung: asyncio.Queue[bytes] = asyncio.Queue()
    try:
        await broadcast.subscribe(channel("s1"), rung.put_nowait)
        log = _log(redis, redis_prefix)
        event = await log.append("s1", "g", b'{"method":"x"}')
        big = await log.append("s1", "g", orjson.dumps({"pad": "x" * MAX_INLINE}))
        async with asyncio.timeout(5):
            small_bell, big_bell = await rung.get(), await rung.get()
        assert decode_doorbell("s1", small_bell) == Delivery(event, {"method": "x"})
        assert decode_doorbell("s1", big_bell) is RESYNC  # too large to ring with: read the log
        assert (await log.replay("s1", "g", 1))[0] == big
    finally:
        await broadcast.close()


async def test_a_dropped_session_forgets_its_streams_and_stores_nothing_more(
    redis: Redis, redis_prefix: str
) -> None:
    broadcast = RedisBroadcast(redis, redis_prefix)
    await broadcast.start()
    rung: asyncio.Queue[bytes] = asyncio.Queue()
    try:
        log = _log(redis, redis_prefix)
        await log.append("s1", "g", b"{}")
        await log.append("s1", "req", b"{}")
        kept = await log.append("s2", "g", b"{}")
        await broadcast.subscribe(channel("s1"), rung.put_nowait)
        assert not await log.closed("s1")

        await log.drop_session("s1")

        async with asyncio.timeout(5):
            assert decode_doorbell("s1", await rung.get()) is CLOSE
        assert await log.closed("s1")
        assert await log.replay("s1", "g", 0) == []
        assert await log.replay("s1", "req", 0) == []
        assert (await log.append("s1", "g", b"{}")).seq == 0  # nobody can read it any more
        assert await log.tail("s1", "g") is None
        assert await log.replay("s2", "g", 0) == [kept]
    finally:
        await broadcast.close()


async def test_a_malformed_entry_is_skipped_not_fatal(redis: Redis, redis_prefix: str) -> None:
    log = _log(redis, redis_prefix)
    first = await log.append("s1", "g", b"{}")
    await redis.xadd(f"{redis_prefix}:ev:{{s1}}:x:g", {"x": "no payload"}, id="2-0")
    await redis.xadd(f"{redis_prefix}:ev:{{s1}}:x:g", {"d": "line\nbreak"}, id="3-0")
    await redis.hset(f"{redis_prefix}:ev:{{s1}}", "g", 3)
    fourth = await log.append("s1", "g", b"[]")
    assert await log.replay("s1", "g", 0) == [first, fourth]


def test_a_replay_page_with_a_broken_frame_yields_what_came_before_and_stops() -> None:
    good = b"1 2\n{}"
    assert list(_frames(good + b"2 2\n[]")) == [(1, b"{}"), (2, b"[]")]
    assert list(_frames(good + b"2 99\n[]")) == [(1, b"{}"), (None, None)]  # truncated
    assert list(_frames(good + b"x 2\n[]")) == [(1, b"{}"), (None, None)]
    assert list(_frames(good + b"2 2 2\n[]")) == [(1, b"{}"), (None, None)]
    assert list(_frames(b"")) == []
