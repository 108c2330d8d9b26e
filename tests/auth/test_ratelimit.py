from __future__ import annotations

import asyncio
import random
import time
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

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
    lease = replicas[0].lease_cap  # 5: 0.1 s at 50/s
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
    held = sum(r.held("burst") for r in replicas)
    # requests come faster than the rate, so every refilled token is taken: 200 + 50/s,
    # counted between the first and the last take (known to lie within these bounds), less
    # what the leases hold at the end; never more than 3 leases over the limit
    assert passed + held >= 200 + 50 * (last_sent - first_answered) - 2
    assert passed <= 200 + 50 * elapsed + 3 * lease + 1
    print(f"passed {passed} of 1000 in {elapsed:.2f} s over 3 replicas")


async def test_without_a_lease_a_check_is_one_round_trip_to_redis(redis_prefix: str) -> None:
    client = cast(CountingRedis, connect(cls=CountingRedis))
    try:
        limiter = RedisRateLimiter(client, redis_prefix, rate=100, burst=1000, lease_seconds=0)
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


# -- leases: a replica takes up to C tokens per round trip ----------------------------------


class FlakyRedis(CountingRedis):
    """A real Redis client that fails every command while ``down`` (Redis gone mid-lease)."""

    down = False

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if self.down:
            self.sent += 1
            raise RedisConnectionError("down (test)")
        return await super().execute_command(*args, **options)


async def bucket_tokens(redis: Redis, limiter: RedisRateLimiter, key: str) -> float:
    return float(await redis.hget(limiter.bucket_key(key), "t") or "nan")


async def test_a_busy_key_leases_c_tokens_per_round_trip(redis_prefix: str) -> None:
    client = cast(CountingRedis, connect(cls=CountingRedis))
    try:
        # 100/s x 0.1 s: leases of up to 10; a frozen clock makes the seen rate "very busy"
        limiter = RedisRateLimiter(client, redis_prefix, rate=100, burst=1000, clock=lambda: 0.0)
        assert limiter.lease_cap == 10
        await client.ping()
        client.sent = 0
        assert [await limiter.take("t") for _ in range(100)] == [None] * 100
        assert client.sent == 1 + 10  # the first lease is 1 token (no rate seen yet), then 10s
        assert limiter.held("t") == 1  # 101 leased
    finally:
        await client.aclose()


async def test_callers_waiting_on_one_key_share_one_round_trip(redis_prefix: str) -> None:
    client = cast(CountingRedis, connect(cls=CountingRedis))
    try:
        limiter = RedisRateLimiter(client, redis_prefix, rate=100, burst=1000, clock=lambda: 0.0)
        await client.ping()
        client.sent = 0
        async with asyncio.timeout(30):
            answers = await asyncio.gather(*(limiter.take("t") for _ in range(50)))
        assert answers == [None] * 50
        assert client.sent == 1 + 5  # 1, then 5 leases of 10 (51 tokens, 1 left)
        assert limiter.held("t") == 1
    finally:
        await client.aclose()


async def test_a_slow_key_takes_one_token_per_round_trip(redis: Redis, redis_prefix: str) -> None:
    now = [0.0]
    limiter = RedisRateLimiter(
        redis, redis_prefix, rate=0.001, burst=1000, lease_seconds=5000, clock=lambda: now[0]
    )
    assert limiter.lease_cap == 5
    for _ in range(5):
        assert await limiter.take("t") is None
        assert limiter.held("t") == 0  # one call per 6,000 s seen: 0.83 per lease, so 1
        now[0] += 6000.0
    assert 994.99 <= await bucket_tokens(redis, limiter, "t") <= 995.01


async def test_an_expired_lease_is_given_back_with_the_next(
    redis: Redis, redis_prefix: str
) -> None:
    now = [0.0]
    limiter = RedisRateLimiter(
        redis, redis_prefix, rate=0.001, burst=20, lease_seconds=5000, clock=lambda: now[0]
    )
    assert limiter.lease_cap == 5
    assert await limiter.take("t") is None  # a lease of 1
    assert await limiter.take("t") is None  # a lease of 5, 4 held
    assert limiter.held("t") == 4
    assert 13.99 <= await bucket_tokens(redis, limiter, "t") <= 14.01
    now[0] = 5001.0  # expired: the 4 go back, 1 seen in 5,001 s leases 1
    assert await limiter.take("t") is None
    assert limiter.held("t") == 0
    assert 16.99 <= await bucket_tokens(redis, limiter, "t") <= 17.01


async def test_three_replicas_never_grant_more_than_burst_plus_three_leases(
    redis: Redis, redis_prefix: str
) -> None:
    """The bound's worst case by counting: every replica holds a lease and the bucket is full
    again (no bucket in Redis is a full one): burst + what they hold, and not one more."""
    clients = [connect() for _ in range(3)]
    try:
        replicas = [
            RedisRateLimiter(
                c, redis_prefix, rate=0.001, burst=30, lease_seconds=4000, clock=lambda: 0.0
            )
            for c in clients
        ]
        cap = replicas[0].lease_cap
        assert cap == 4
        for replica in replicas:
            assert [await replica.take("t") for _ in range(2)] == [None, None]
        assert [r.held("t") for r in replicas] == [cap - 1] * 3
        await redis.delete(replicas[0].bucket_key("t"))
        granted = 0
        for i in range(200):  # round-robin, as a client spreading its calls would
            granted += await replicas[i % 3].take("t") is None
    finally:
        for client in clients:
            await client.aclose()
    assert granted == 30 + 3 * (cap - 1)
    assert granted <= 30 + 3 * cap


async def test_spread_over_three_replicas_the_grants_stay_within_the_bound(
    redis: Redis, redis_prefix: str
) -> None:
    """Random interleavings on three replicas, time frozen (no refill): every token handed out
    came from the bucket, so grants + tokens held == burst exactly, and grants never fall short
    of burst by more than what the other replicas hold."""
    rng = random.Random(26)
    clients = [connect() for _ in range(3)]
    try:
        for trial in range(5):
            key = f"trial{trial}"
            replicas = [
                RedisRateLimiter(
                    c, redis_prefix, rate=0.0001, burst=50, lease_seconds=80_000, clock=lambda: 0.0
                )
                for c in clients
            ]
            granted = 0
            async with asyncio.timeout(30):
                for _ in range(12):  # waves of concurrent calls on random replicas
                    wave = [rng.randrange(3) for _ in range(rng.randrange(1, 12))]
                    answers = await asyncio.gather(*(replicas[i].take(key) for i in wave))
                    granted += sum(a is None for a in answers)
            held = sum(r.held(key) for r in replicas)
            left = await bucket_tokens(redis, replicas[0], key)
            assert granted + held + left == pytest.approx(50, abs=0.01)
            assert granted <= 50
    finally:
        for client in clients:
            await client.aclose()


async def test_when_redis_goes_down_mid_lease_the_lease_is_spent_then_the_fallback(
    redis_prefix: str,
) -> None:
    now = [0.0]
    client = cast(FlakyRedis, connect(cls=FlakyRedis))
    try:
        limiter = RedisRateLimiter(
            client,
            redis_prefix,
            rate=0.001,
            burst=100,
            lease_seconds=5000,
            fallback=RateLimiter(rate=0.001, burst=2, clock=lambda: now[0]),
            clock=lambda: now[0],
        )
        assert [await limiter.take("t") for _ in range(2)] == [None, None]
        assert limiter.held("t") == 4
        client.down = True
        client.sent = 0
        assert [await limiter.take("t") for _ in range(4)] == [None] * 4  # leased: no Redis
        assert client.sent == 0
        answers = [await limiter.take("t") for _ in range(3)]  # the fallback's burst of 2
        assert answers[:2] == [None, None]
        assert answers[2] is not None
        assert client.sent == 1  # one failure, then the fallback alone for a second
        now[0] += 2.0
        client.down = False
        assert await limiter.take("t") is None  # Redis again
        assert client.sent == 2
    finally:
        await client.aclose()


async def test_a_lease_given_back_when_redis_fails_is_dropped_not_spent_twice(
    redis_prefix: str,
) -> None:
    now = [0.0]
    client = cast(FlakyRedis, connect(cls=FlakyRedis))
    try:
        limiter = RedisRateLimiter(
            client, redis_prefix, rate=0.001, burst=100, lease_seconds=5000, clock=lambda: now[0]
        )
        assert [await limiter.take("t") for _ in range(2)] == [None, None]
        assert limiter.held("t") == 4
        now[0] = 5001.0  # expired: the next take gives the 4 back, and the answer is lost
        client.down = True
        await limiter.take("t")  # answered by the fallback
        assert limiter.held("t") == 0  # maybe given back: never spent here as well
    finally:
        await client.aclose()
