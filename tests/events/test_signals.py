from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from appdeck.events.cluster import Cluster
from appdeck.events.signals import LocalBroadcast, RedisBroadcast
from tests.support.redis import REDIS_URL, connect


class Inbox:
    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.arrived = asyncio.Event()

    def __call__(self, payload: bytes) -> None:
        self.items.append(payload)
        self.arrived.set()

    async def wait_for(self, count: int) -> list[bytes]:
        async with asyncio.timeout(5):
            while len(self.items) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.items


async def test_a_local_broadcast_reaches_every_handler_of_the_channel_before_publish_returns() -> (
    None
):
    broadcast = LocalBroadcast()
    first, second, other = Inbox(), Inbox(), Inbox()
    await broadcast.subscribe("task-cancel", first)
    sub = await broadcast.subscribe("task-cancel", second)
    await broadcast.subscribe("elsewhere", other)
    await broadcast.publish("task-cancel", b"t1")
    await broadcast.unsubscribe(sub)
    await broadcast.publish("task-cancel", b"t2")
    assert first.items == [b"t1", b"t2"]
    assert second.items == [b"t1"]
    assert other.items == []


async def test_a_handler_that_raises_does_not_stop_the_others() -> None:
    broadcast = LocalBroadcast()
    inbox = Inbox()

    def broken(payload: bytes) -> None:
        raise RuntimeError("boom")

    await broadcast.subscribe("c", broken)
    await broadcast.subscribe("c", inbox)
    await broadcast.publish("c", b"x")
    assert inbox.items == [b"x"]


async def test_a_message_published_by_one_replica_reaches_the_others_through_redis(
    redis: Redis, redis_prefix: str
) -> None:
    a, b = RedisBroadcast(redis, redis_prefix), RedisBroadcast(redis, redis_prefix)
    await a.start()
    await b.start()
    try:
        on_a, on_b = Inbox(), Inbox()
        await a.subscribe("revoked", on_a)
        await b.subscribe("revoked", on_b)
        await a.publish("revoked", b"jti-1")
        assert await on_b.wait_for(1) == [b"jti-1"]
        assert await on_a.wait_for(1) == [b"jti-1"]  # the publisher hears itself too
    finally:
        await a.close()
        await b.close()


async def test_another_deployments_prefix_hears_nothing(redis: Redis, redis_prefix: str) -> None:
    ours, theirs = RedisBroadcast(redis, redis_prefix), RedisBroadcast(redis, redis_prefix + "x")
    await ours.start()
    await theirs.start()
    try:
        heard, mine = Inbox(), Inbox()
        await theirs.subscribe("revoked", heard)
        await ours.subscribe("revoked", mine)
        await ours.publish("revoked", b"jti")
        await mine.wait_for(1)
        await asyncio.sleep(0.2)
        assert heard.items == []
    finally:
        await ours.close()
        await theirs.close()


async def test_after_a_dropped_connection_the_reader_resubscribes_and_says_so(
    redis: Redis, redis_prefix: str
) -> None:
    name = f"{redis_prefix}-listener"
    listener = RedisBroadcast(connect(client_name=name), redis_prefix)
    await listener.start()
    reconnected = asyncio.Event()
    listener.on_reconnect(reconnected.set)
    inbox = Inbox()
    await listener.subscribe("routes", inbox)
    try:
        # kill the subscriber's connection from the server side, as a Redis restart would
        killed = 0
        for client in await redis.client_list(_type="pubsub"):
            if client.get("name") == name:
                killed += await redis.client_kill_filter(_id=client["id"])
        assert killed == 1
        async with asyncio.timeout(10):
            await reconnected.wait()
        await redis.publish(f"{redis_prefix}:b:routes", b"after")
        assert await inbox.wait_for(1) == [b"after"]
    finally:
        await listener.close()
        await listener._redis.aclose()


async def test_a_cluster_without_redis_is_one_process_with_a_local_broadcast() -> None:
    cluster = Cluster.alone()
    assert not cluster.shared
    assert isinstance(cluster.broadcast, LocalBroadcast)
    assert len(cluster.instance_id) == 16


async def test_a_cluster_with_redis_is_shared_and_closes_cleanly(redis_prefix: str) -> None:
    cluster = await Cluster.connect(REDIS_URL, redis_prefix)
    try:
        assert cluster.shared
        assert cluster.redis is not None
        assert await cluster.redis.ping()
    finally:
        await cluster.close()
