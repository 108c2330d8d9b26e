"""Stream leases: one holder per key across replicas; a dead holder's lease expires; a late
holder never removes or renews a lease someone else took."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from appdeck.events.leases import LocalLeases, RedisLeases


async def test_a_second_replica_cannot_take_a_held_lease_until_it_is_released(
    redis: Redis, redis_prefix: str
) -> None:
    a, b = RedisLeases(redis, redis_prefix), RedisLeases(redis, redis_prefix)
    held = await a.acquire("s1:g")
    assert held is not None
    assert await b.acquire("s1:g") is None
    assert await b.acquire("s2:g") is not None  # another session's stream is free
    await a.release(held)
    assert await b.acquire("s1:g") is not None


async def test_a_holder_that_stops_renewing_loses_the_lease_within_its_ttl(
    redis: Redis, redis_prefix: str
) -> None:
    dead = RedisLeases(redis, redis_prefix, ttl_seconds=0.3)
    alive = RedisLeases(redis, redis_prefix, ttl_seconds=0.3)
    stale = await dead.acquire("s1:g")
    assert stale is not None
    await asyncio.sleep(0.4)  # past the ttl: nobody renewed it
    taken = await alive.acquire("s1:g")
    assert taken is not None
    # the old holder wakes up: it can neither renew nor release the new holder's lease
    assert not await dead.renew(stale)
    await dead.release(stale)
    assert await alive.renew(taken)
    assert await redis.get(f"{redis_prefix}:lease:s1:g") == taken.token.encode()


async def test_a_renewed_lease_outlives_its_first_ttl(redis: Redis, redis_prefix: str) -> None:
    leases = RedisLeases(redis, redis_prefix, ttl_seconds=0.3)
    other = RedisLeases(redis, redis_prefix, ttl_seconds=0.3)
    lease = await leases.acquire("s1:g")
    assert lease is not None
    assert leases.renew_every < 0.3
    for _ in range(6):  # 0.6 s in all, renewed every 0.1 s
        await asyncio.sleep(0.1)
        assert await leases.renew(lease)
    assert await other.acquire("s1:g") is None
    await leases.release(lease)


async def test_local_leases_keep_one_holder_per_key_and_never_expire() -> None:
    leases = LocalLeases()
    held = await leases.acquire("s1:g")
    assert held is not None
    assert await leases.acquire("s1:g") is None
    assert await leases.renew(held)
    await leases.release(held)
    again = await leases.acquire("s1:g")
    assert again is not None
    await leases.release(held)  # a stale release does not free the new holder's lease
    assert await leases.acquire("s1:g") is None


async def test_a_resuming_client_takes_a_redis_lease_from_its_old_holder(
    redis: Redis, redis_prefix: str
) -> None:
    old, new = RedisLeases(redis, redis_prefix), RedisLeases(redis, redis_prefix)
    stale = await old.acquire("s1:g")
    assert stale is not None
    taken = await new.take("s1:g")
    assert taken is not None
    assert not await old.renew(stale)
    await old.release(stale)  # the old holder's release leaves the new lease alone
    assert await new.renew(taken)
    assert await old.acquire("s1:g") is None


async def test_local_leases_refuse_a_take_as_they_refuse_a_second_claim() -> None:
    leases = LocalLeases()
    assert await leases.acquire("s1:g") is not None
    assert await leases.take("s1:g") is None
