"""The buses: in-process fan-out, and the Redis bus fed by the log's doorbells (real Redis)."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from appdeck.events.bus import (
    CLOSE,
    RESYNC,
    Delivery,
    InProcessBus,
    Listener,
    RedisBus,
    Taken,
    channel,
    decode_doorbell,
)
from appdeck.events.ports import StoredEvent
from appdeck.events.redis_log import RedisEventLog
from appdeck.events.signals import RedisBroadcast
from tests.support.redis import connect
from tests.support.wait import until


async def _next(listener: Listener) -> object:
    async with asyncio.timeout(5):
        while (item := await listener.get(1)) is None:
            pass
        return item


async def test_the_in_process_bus_reaches_the_sessions_listeners_only() -> None:
    bus = InProcessBus()
    mine, theirs = await bus.subscribe("s1"), await bus.subscribe("s2")
    delivery = Delivery(StoredEvent("s1", "g", 1, b"{}"), {})
    await bus.publish("s1", delivery)
    assert await _next(mine) == delivery
    assert await theirs.get(0.05) is None
    await bus.unsubscribe(mine)
    await bus.publish("s1", CLOSE)
    assert await mine.get(0.05) is None


async def test_an_event_appended_on_one_replica_reaches_a_listener_on_another(
    redis: Redis, redis_prefix: str
) -> None:
    broadcast = RedisBroadcast(redis, redis_prefix)
    await broadcast.start()
    try:
        bus = RedisBus(broadcast)
        mine, theirs = await bus.subscribe("s1"), await bus.subscribe("s2")
        writer = RedisEventLog(redis, redis_prefix, retention_seconds=60)  # "replica A"
        event = await writer.append("s1", "g", b'{"n":1}')
        item = await _next(mine)
        assert item == Delivery(event, {"n": 1})
        assert await theirs.get(0.1) is None
        await bus.unsubscribe(mine)
        await bus.unsubscribe(theirs)
        assert bus._groups == {}
    finally:
        await broadcast.close()


async def test_a_close_on_one_replica_closes_the_sessions_listeners_on_every_replica(
    redis: Redis, redis_prefix: str
) -> None:
    a, c = RedisBroadcast(redis, redis_prefix), RedisBroadcast(redis, redis_prefix)
    await a.start()
    await c.start()
    try:
        on_a, on_c = RedisBus(a), RedisBus(c)
        listener = await on_c.subscribe("s1")
        await on_a.publish("s1", CLOSE)
        assert await _next(listener) is CLOSE
    finally:
        await a.close()
        await c.close()


async def test_a_malformed_doorbell_is_dropped_and_the_listener_keeps_going(
    redis: Redis, redis_prefix: str
) -> None:
    broadcast = RedisBroadcast(redis, redis_prefix)
    await broadcast.start()
    try:
        bus = RedisBus(broadcast)
        listener = await bus.subscribe("s1")
        for junk in (b"", b"x", b"eno-dot\n{}", b"eg.12x\n{}", b"eg.1", b"eg.1\n{\n}"):
            await broadcast.publish(channel("s1"), junk)
        await broadcast.publish(channel("s1"), b"eg.1\nnot json")  # the log has it: re-read
        await broadcast.publish(channel("s1"), b'eg.2\n{"ok":true}')
        assert await _next(listener) is RESYNC
        item = await _next(listener)
        assert isinstance(item, Delivery)
        assert (item.event.seq, item.message) == (2, {"ok": True})
    finally:
        await broadcast.close()


async def test_after_a_dropped_connection_every_listener_is_told_to_read_the_log(
    redis: Redis, redis_prefix: str
) -> None:
    name = f"{redis_prefix}-bus"
    own = connect(client_name=name)
    broadcast = RedisBroadcast(own, redis_prefix)
    await broadcast.start()
    try:
        bus = RedisBus(broadcast)
        listener = await bus.subscribe("s1")
        killed = 0
        for client in await redis.client_list(_type="pubsub"):
            if client.get("name") == name:
                killed += await redis.client_kill_filter(_id=client["id"])
        assert killed == 1
        async with asyncio.timeout(10):
            assert await _next(listener) is RESYNC
    finally:
        await broadcast.close()
        await own.aclose()


def test_a_taken_doorbell_names_the_stream_and_a_bad_one_is_dropped() -> None:
    assert decode_doorbell("s1", b"tg") == Taken("g")
    assert decode_doorbell("s1", b"t") is None
    assert decode_doorbell("s1", b"t" + b"x" * 65) is None
    assert decode_doorbell("s1", "tgé".encode()) is None


def _delivery(seq: int) -> Delivery:
    return Delivery(StoredEvent("s1", "g", seq, b"{}"), {})


async def test_a_waiting_readers_deliveries_go_to_its_sink_without_waking_it() -> None:
    listener = Listener("s1")
    written: list[int] = []
    listener.write_through(lambda d: written.append(d.event.seq) is None)
    reader = asyncio.create_task(listener.get(5))
    await until(lambda: listener._idle)
    listener.put(_delivery(1))
    listener.put(_delivery(2))
    assert written == [1, 2]
    assert not reader.done()
    listener.put(CLOSE)  # not a delivery: the reader's own
    assert await reader is CLOSE
    assert written == [1, 2]


async def test_once_a_delivery_is_queued_the_next_ones_queue_behind_it() -> None:
    listener = Listener("s1")
    offered: list[int] = []

    def sink(delivery: Delivery) -> bool:
        offered.append(delivery.event.seq)
        return delivery.event.seq != 1  # declines the first: the reader must send it

    listener.write_through(sink)
    reader = asyncio.create_task(listener.get(5))
    await until(lambda: listener._idle)
    for seq in (1, 2, 3):
        listener.put(_delivery(seq))
    assert offered == [1]
    assert [await reader, await listener.get(5), await listener.get(5)] == [
        _delivery(1),
        _delivery(2),
        _delivery(3),
    ]
    reader = asyncio.create_task(listener.get(5))  # waiting on an empty queue again
    await until(lambda: listener._idle)
    listener.put(_delivery(4))
    assert offered == [1, 4]
    reader.cancel()


async def test_deliveries_are_queued_while_no_reader_waits() -> None:
    listener = Listener("s1")
    offered: list[int] = []
    listener.write_through(lambda d: offered.append(d.event.seq) is None)
    listener.put(_delivery(1))
    assert offered == []
    assert await listener.get(5) == _delivery(1)
