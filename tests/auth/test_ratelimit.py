from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from redis.asyncio import Redis

from appdeck.auth.ratelimit import RateLimiter, RedisRateLimiter
from tests.support.redis import connect


def test_a_burst_is_allowed_then_the_rate_applies() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2, burst=3, clock=lambda: now[0])
    assert [limiter.check("t") for _ in range(3)] == [None, None, None]
    wait = limiter.check("t")
    assert wait == 500
    now[0] += 0.5
    assert limiter.check("t") is None


def test_tokens_have_separate_buckets() -> None:
    limiter = RateLimiter(rate=1, burst=1, clock=lambda: 0.0)
    assert limiter.check("a") is None
    assert limiter.check("b") is None
    assert limiter.check("a") is not None


def test_a_zero_rate_means_no_limit() -> None:
    limiter = RateLimiter(rate=0, burst=1)
    assert all(limiter.check("t") is None for _ in range(1000))


# -- shared buckets in Redis (replicas) --------------------------------------------------


class CountingRedis(Redis):
    """A real Redis client that counts the commands it sends (round trips per check)."""

    sent = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent += 1
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


async def test_the_in_process_limiter_answers_take_like_check() -> None:
    limiter = RateLimiter(rate=1, burst=2, clock=lambda: 0.0)
    assert [await limiter.take("t") for _ in range(2)] == [None, None]
    assert await limiter.take("t") == 1000


async def test_replicas_share_one_bucket_per_token(redis: Redis, redis_prefix: str) -> None:
    clients = [connect() for _ in range(3)]
    try:
        replicas = [RedisRateLimiter(c, redis_prefix, rate=0.001, burst=5) for c in clients]
        answers = [await replicas[i % 3].take("tok") for i in range(9)]
    finally:
        for client in clients:
            await client.aclose()
    assert answers[:5] == [None] * 5
    assert all(isinstance(a, int) and a > 0 for a in answers[5:])  # 5, not 3 x 5
    assert await RedisRateLimiter(redis, redis_prefix, 0.001, 5).take("other") is None


async def test_a_refused_check_says_how_long_to_wait(redis: Redis, redis_prefix: str) -> None:
    limiter = RedisRateLimiter(redis, redis_prefix, rate=2, burst=1)
    assert await limiter.take("t") is None
    wait = await limiter.take("t")
    assert wait is not None
    assert 1 <= wait <= 500
    async with asyncio.timeout(5):
        await asyncio.sleep(wait / 1000 + 0.05)
    assert await limiter.take("t") is None


async def test_fifty_per_second_burst_200_over_three_replicas_passes_about_300_of_1000_in_2s(
    redis_prefix: str,
) -> None:
    clients = [connect() for _ in range(3)]
    replicas = [RedisRateLimiter(c, redis_prefix, rate=50, burst=200) for c in clients]
    passed = 0
    try:
        async with asyncio.timeout(30):
            for client in clients:  # open the connections first: their set-up is not the test
                await asyncio.gather(*(client.ping() for _ in range(50)))
            start = time.monotonic()
            for wave in range(20):  # 1,000 requests, 50 every 0.1 s, round-robin
                if wave == 19:
                    last_sent = time.monotonic()
                answers = await asyncio.gather(
                    *(replicas[(wave * 50 + i) % 3].take("burst") for i in range(50))
                )
                if wave == 0:
                    first_answered = time.monotonic()
                passed += sum(a is None for a in answers)
                await asyncio.sleep(max(0.0, start + (wave + 1) * 0.1 - time.monotonic()))
            elapsed = time.monotonic() - start
    finally:
        for client in clients:
            await client.aclose()
    # requests come faster than the rate, so every refilled token is taken: 200 + 50/s,
    # counted between the first and the last take (known to lie within these bounds)
    assert passed >= 200 + 50 * (last_sent - first_answered) - 2
    assert passed <= 200 + 50 * elapsed + 1
    print(f"passed {passed} of 1000 in {elapsed:.2f} s over 3 replicas")


async def test_a_check_is_one_round_trip_to_redis(redis_prefix: str) -> None:
    client = cast(CountingRedis, connect(cls=CountingRedis))
    try:
        limiter = RedisRateLimiter(client, redis_prefix, rate=100, burst=1000)
        await limiter.take("warm")  # may load the script once (NOSCRIPT on a fresh server)
        client.sent = 0
        for _ in range(100):
            await limiter.take("t")
        assert client.sent == 100
    finally:
        await client.aclose()


async def test_a_bucket_expires_once_it_would_be_full_again(
    redis: Redis, redis_prefix: str
) -> None:
    limiter = RedisRateLimiter(redis, redis_prefix, rate=10, burst=20)
    await limiter.take("t")
    ttl = await redis.pttl(limiter.bucket_key("t"))
    assert 0 < ttl <= 2000 + 1000  # 20 tokens at 10/s, plus a second


async def test_a_hostile_key_names_a_bounded_redis_key(redis: Redis, redis_prefix: str) -> None:
    limiter = RedisRateLimiter(redis, redis_prefix, rate=1, burst=1)
    key = "x" * 100_000 + "\udcff"
    assert await limiter.take(key) is None
    assert await limiter.take(key) is not None
    names = [k async for k in redis.scan_iter(match=f"{redis_prefix}:rl:*")]
    assert len(names) == 1
    assert len(names[0]) < 100


async def test_a_malformed_bucket_in_redis_is_read_as_full(redis: Redis, redis_prefix: str) -> None:
    limiter = RedisRateLimiter(redis, redis_prefix, rate=0.001, burst=2)
    await redis.hset(limiter.bucket_key("t"), mapping={"t": "nan", "ms": "garbage"})
    assert await limiter.take("t") is None
    assert await limiter.take("t") is None
    assert await limiter.take("t") is not None


async def test_when_redis_is_unreachable_each_replica_limits_on_its_own(
    redis_prefix: str,
) -> None:
    gone = Redis(host="127.0.0.1", port=1, socket_connect_timeout=1, socket_timeout=1)
    try:
        limiter = RedisRateLimiter(gone, redis_prefix, rate=0.001, burst=2)
        async with asyncio.timeout(30):
            answers = [await limiter.take("t") for _ in range(3)]
            # after a failure the fallback answers alone for a while: no wait per request
            quick = time.monotonic()
            await limiter.take("u")
            assert time.monotonic() - quick < 0.5
    finally:
        await gone.aclose()
    assert answers[:2] == [None, None]
    assert answers[2] is not None


async def test_a_zero_rate_asks_redis_nothing(redis_prefix: str) -> None:
    client = cast(CountingRedis, connect(cls=CountingRedis))
    try:
        limiter = RedisRateLimiter(client, redis_prefix, rate=0, burst=1)
        assert all([await limiter.take("t") is None for _ in range(10)])
        assert client.sent == 0
    finally:
        await client.aclose()
