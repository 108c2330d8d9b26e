"""Stream events through Redis between two processes (issue 13): notification latency and
replay time.

1. **Latency**: a publisher process (replica A) appends numbered notifications to one
   session's GET stream through :class:`StreamHub` on the Redis log, at a fixed rate; this
   process (replica C) listens through the :class:`RedisBus` and delivers them as the GET
   reader does (``seq == last + 1``, else a read of the log). Latency = the reader's receipt
   time minus the publisher's time before its append (one host, one clock). Every event must
   arrive exactly once, in order.
2. **Replay**: the time to read 1k and 10k events of one stream back from the log in the GET
   reader's pages (500 per XRANGE), as a ``Last-Event-ID`` resumption does.

    .venv/bin/python bench/stream_latency.py [--redis redis://127.0.0.1:6379/0] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
import uuid
from typing import Any

import orjson
from redis.asyncio import Redis

from appdeck.events.bus import CLOSE, RESYNC, Delivery, RedisBus
from appdeck.events.leases import LocalLeases
from appdeck.events.redis_log import RedisEventLog
from appdeck.events.signals import RedisBroadcast
from appdeck.transport.hub import StreamHub

SESSION = "bench-session"
PAGE = 500


def _publisher(url: str, prefix: str, rate: int, count: int, go: Any) -> None:
    async def main() -> None:
        redis = Redis.from_url(url)
        broadcast = RedisBroadcast(redis, prefix)
        await broadcast.start()
        hub = StreamHub(
            RedisEventLog(redis, prefix, retention_seconds=600), RedisBus(broadcast), LocalLeases()
        )
        go.wait()
        start = time.perf_counter()
        for n in range(1, count + 1):
            due = start + (n - 1) / rate
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            note = {"jsonrpc": "2.0", "method": "notifications/message"}
            await hub.to_session(SESSION, {**note, "params": {"n": n, "t": time.time_ns()}})
        await broadcast.close()
        await redis.aclose()

    asyncio.run(main())


async def _latency(url: str, prefix: str, rate: int, seconds: float) -> dict[str, float]:
    count = int(rate * seconds)
    redis = Redis.from_url(url)
    broadcast = RedisBroadcast(redis, prefix)
    await broadcast.start()
    log = RedisEventLog(redis, prefix, retention_seconds=600)
    bus = RedisBus(broadcast)
    listener = await bus.subscribe(SESSION)
    last = await log.tail(SESSION, "g") or 0
    first = last
    go = multiprocessing.get_context("spawn").Event()
    proc = multiprocessing.get_context("spawn").Process(
        target=_publisher, args=(url, prefix, rate, count, go)
    )
    proc.start()
    go.set()
    latencies: list[float] = []
    numbers: list[int] = []
    read_back = 0

    def take(payload: bytes, now: int) -> None:
        params = orjson.loads(payload)["params"]
        numbers.append(params["n"])
        latencies.append((now - params["t"]) / 1e6)

    async with asyncio.timeout(seconds * 3 + 30):
        while last - first < count:
            item = await listener.get(1.0)
            if item is CLOSE:
                raise RuntimeError("closed")
            gap = item is None or item is RESYNC
            if isinstance(item, Delivery):
                if item.event.seq <= last:
                    continue
                if item.event.seq == last + 1:
                    take(item.event.payload, time.time_ns())
                    last += 1
                    continue
                gap = True
            if gap:
                for event in await log.replay(SESSION, "g", last, PAGE):
                    take(event.payload, time.time_ns())
                    last = event.seq
                    read_back += 1
    proc.join(30)
    await bus.unsubscribe(listener)
    await broadcast.close()
    await redis.aclose()
    assert numbers == list(range(1, count + 1)), "lost, repeated or out of order"
    q = statistics.quantiles(latencies, n=100)
    return {
        "rate": rate,
        "events": count,
        "p50_ms": q[49],
        "p99_ms": q[98],
        "max_ms": max(latencies),
        "read_back": read_back,
    }


async def _replay(url: str, prefix: str, count: int) -> float:
    redis = Redis.from_url(url)
    log = RedisEventLog(redis, prefix, retention_seconds=600)
    payload = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})
    payload = payload[:-2] + b'"pad":"' + b"x" * 150 + b'"}}'
    stream = f"r{count}"
    for start in range(0, count, 1000):
        batch = min(1000, count - start)
        await log.append_many([(SESSION, stream, payload)] * batch)
    begin = time.perf_counter()
    last, seen = 0, 0
    while True:
        events = await log.replay(SESSION, stream, last, PAGE)
        seen += len(events)
        if events:
            last = events[-1].seq
        if len(events) < PAGE:
            break
    elapsed = time.perf_counter() - begin
    assert seen == count
    await redis.aclose()
    return elapsed * 1000


async def _clean(url: str, prefix: str) -> None:
    redis = Redis.from_url(url)
    keys = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    try:
        for rate in (100, 1000):
            r = await _latency(args.redis, prefix, rate, args.seconds)
            print(
                f"{rate:>5}/s  {r['events']:>6} events  p50 {r['p50_ms']:.2f} ms  "
                f"p99 {r['p99_ms']:.2f} ms  max {r['max_ms']:.2f} ms  "
                f"read back from the log {r['read_back']}"
            )
        for count in (1000, 10_000):
            ms = await _replay(args.redis, prefix, count)
            print(f"replay {count:>6} events (~200 B each): {ms:.1f} ms")
    finally:
        await _clean(args.redis, prefix)


if __name__ == "__main__":
    asyncio.run(main())
