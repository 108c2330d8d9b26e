"""Every replica's ingress serves every route: a route change on one replica reaches the
others' tables through the broadcast (real Redis, and the in-process default), malformed
messages are dropped, and a replica whose connection dropped reloads (the reload itself, from
the database: ``test_engine.py``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from appdeck.events.signals import LocalBroadcast, RedisBroadcast
from appdeck.ingress import Counters, RouteTable
from appdeck.ingress import routes as ingress
from appdeck.platform.deploy.ingress_router import CHANNEL, IngressRouter, decode, encode
from appdeck.platform.deploy.ports import Backend, RouterPort
from tests.support.redis import connect

ONE = [Backend("1-1", 100, ("127.0.0.1:20001", "127.0.0.1:20002"))]
CANARY = [Backend("1-2", 10, ("127.0.0.1:20003",)), Backend("1-1", 90, ("127.0.0.1:20001",))]


def _router() -> IngressRouter:
    return IngressRouter(RouteTable(), Counters())


def _weights(router: IngressRouter, route: str) -> dict[str, int] | None:
    found = router.table.get(route)
    return None if found is None else {b.release_id: b.weight for b in found}


async def _until(check: Callable[[], bool]) -> None:
    """Wait (bounded) for another replica's table to follow."""
    async with asyncio.timeout(5):
        for _ in range(500):
            if check():
                return
            await asyncio.sleep(0.01)
    assert check()


@pytest.fixture
async def redis_broadcasts(redis_prefix: str) -> AsyncIterator[list[RedisBroadcast]]:
    clients = [connect() for _ in range(3)]
    made = [RedisBroadcast(client, redis_prefix) for client in clients]
    for broadcast in made:
        await broadcast.start()
    yield made
    for broadcast in made:
        await broadcast.close()
    for client in clients:
        await client.aclose()


async def test_a_route_change_on_one_replica_reaches_the_others_through_redis(
    redis_broadcasts: list[RedisBroadcast],
) -> None:
    a, b, c = _router(), _router(), _router()
    for router, broadcast, name in zip((a, b, c), redis_broadcasts, "abc", strict=True):
        await router.share(broadcast, name)
    try:
        a.route("shop--acme", ONE)
        await _until(lambda: _weights(b, "shop--acme") == {"1-1": 100})
        await _until(lambda: _weights(c, "shop--acme") == {"1-1": 100})
        assert b.table.resolve(b"shop--acme.localhost") is not None
        b.route("shop--acme", CANARY)  # whoever holds the app next
        await _until(lambda: _weights(a, "shop--acme") == {"1-2": 10, "1-1": 90})
        a.move("shop--acme", "store--acme")  # renamed
        await _until(lambda: "shop--acme" not in c.table and "store--acme" in c.table)
        a.unroute("store--acme")  # no live release: 503, still known
        await _until(lambda: _weights(c, "store--acme") == {})
        a.forget("store--acme")  # deleted: 404
        await _until(lambda: "store--acme" not in b.table)
        assert c.routes() == []
    finally:
        for router in (a, b, c):
            await router.close()


async def test_a_burst_of_changes_leaves_every_replica_on_the_last_one(
    redis_broadcasts: list[RedisBroadcast],
) -> None:
    a, b = _router(), _router()
    await a.share(redis_broadcasts[0], "a")
    await b.share(redis_broadcasts[1], "b")
    try:
        for step in range(1, 100):
            a.route(
                "shop--acme",
                [
                    Backend("1-2", step, ("127.0.0.1:20003",)),
                    Backend("1-1", 100 - step, ("127.0.0.1:20001",)),
                ],
            )
        a.route("shop--acme", ONE)
        await a.published()
        await _until(lambda: _weights(b, "shop--acme") == {"1-1": 100})
    finally:
        await a.close()
        await b.close()


async def test_one_process_shares_through_the_local_broadcast_too() -> None:
    broadcast = LocalBroadcast()
    a, b = _router(), _router()
    await a.share(broadcast, "a")
    await b.share(broadcast, "b")
    try:
        a.route("shop--acme", ONE)
        await a.published()
        assert _weights(b, "shop--acme") == {"1-1": 100}
    finally:
        await a.close()
        await b.close()


async def test_through_the_router_port_apply_stays_on_this_replica_and_route_does_not() -> None:
    broadcast = LocalBroadcast()
    a, b = _router(), _router()
    await a.share(broadcast, "a")
    await b.share(broadcast, "b")
    port: RouterPort = a  # what the deploy engine holds: no isinstance to reach apply
    try:
        port.apply("shop--acme", ONE)  # after a restart: every replica routes it by itself
        await port.published()
        assert _weights(a, "shop--acme") == {"1-1": 100}
        assert _weights(b, "shop--acme") is None
        port.route("shop--acme", CANARY)
        await port.published()  # returns once b has it (its own message came back)
        assert _weights(b, "shop--acme") == {"1-2": 10, "1-1": 90}
        port.apply("shop--acme", [])  # known, nothing to serve: here only
        await port.published()
        assert _weights(a, "shop--acme") == {}
        assert _weights(b, "shop--acme") == {"1-2": 10, "1-1": 90}
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        json.dumps({"o": "x", "r": "Bad Key!", "b": None}).encode(),
        json.dumps({"o": "x", "r": "shop--acme", "b": [["1-1", 100, ["10.0.0.1:80"]]]}).encode(),
        json.dumps({"o": "x", "r": "shop--acme", "b": [["1-1", 60, ["127.0.0.1:1"]]]}).encode(),
        json.dumps({"o": "x", "r": "shop--acme", "b": [["1-1", "100", []]]}).encode(),
        json.dumps({"o": "x", "r": "shop--acme", "b": "everything"}).encode(),
        json.dumps({"o": 7, "r": "shop--acme", "b": None}).encode(),
        b"{" + b" " * 70_000 + b"}",
        b"[" * 30_000 + b"]" * 30_000,
        "é".encode("latin-1"),
    ],
)
async def test_a_malformed_route_message_is_dropped_and_the_table_kept(payload: bytes) -> None:
    with pytest.raises((ValueError, TypeError, RecursionError)):
        decode(payload)
    broadcast = LocalBroadcast()
    b = _router()
    b.route("shop--acme", ONE)
    await b.share(broadcast, "b")
    try:
        await broadcast.publish(CHANNEL, payload)  # the handler runs now: it must not raise
        assert _weights(b, "shop--acme") == {"1-1": 100}
    finally:
        await b.close()


def test_a_route_message_carries_the_whole_route() -> None:
    table = [ingress.Backend(b.release_id, b.weight, tuple(b.upstreams)) for b in CANARY]
    assert decode(encode("a", "shop--acme", table)) == ("a", "shop--acme", table)
    assert decode(encode("a", "shop--acme", None)) == ("a", "shop--acme", None)
    assert decode(encode("a", "shop--acme", [])) == ("a", "shop--acme", [])


async def test_after_a_reconnect_the_replica_reloads_its_routes(redis_prefix: str) -> None:
    name = f"{redis_prefix}-routes"
    client = connect(client_name=name)
    broadcast = RedisBroadcast(client, redis_prefix)
    await broadcast.start()
    reloaded = asyncio.Event()

    async def reload() -> None:
        reloaded.set()

    b = _router()
    await b.share(broadcast, "b", missed=reload)
    admin = connect()
    try:
        killed = 0
        for found in await admin.client_list(_type="pubsub"):
            if found.get("name") == name:
                killed += await admin.client_kill_filter(_id=found["id"])
        assert killed == 1
        async with asyncio.timeout(10):
            await reloaded.wait()
    finally:
        await b.close()
        await broadcast.close()
        await client.aclose()
        await admin.aclose()


async def test_a_canary_is_analysed_on_what_every_replicas_ingress_answered(
    redis_broadcasts: list[RedisBroadcast], redis: Redis, redis_prefix: str
) -> None:
    a, b = _router(), _router()
    await a.share(redis_broadcasts[0], "a", redis=redis, prefix=redis_prefix)
    await b.share(redis_broadcasts[1], "b", redis=redis, prefix=redis_prefix)
    try:
        a.route("shop--acme", CANARY)
        await _until(lambda: "shop--acme" in b.table)
        a.counters.record("shop--acme", "1-2", 200, 0.01)  # before the mark: not counted
        a.mark("shop--acme", "1-2")
        await asyncio.sleep(1.2)  # the baseline is read
        for _ in range(10):
            a.counters.record("shop--acme", "1-2", 200, 0.01)
        for status in [200] * 15 + [503] * 5:
            b.counters.record("shop--acme", "1-2", status, 0.01)
        await _until(lambda: a.window("shop--acme", "1-2") == (30, 5))
        a.mark("shop--acme", "1-2")  # the next step starts from here
        await _until(lambda: a.window("shop--acme", "1-2") == (0, 0))
    finally:
        await a.close()
        await b.close()


async def test_counters_read_back_from_redis_are_checked(
    redis_broadcasts: list[RedisBroadcast], redis: Redis, redis_prefix: str
) -> None:
    a = _router()
    await a.share(redis_broadcasts[0], "a", redis=redis, prefix=redis_prefix)
    try:
        a.route("shop--acme", CANARY)
        a.mark("shop--acme", "1-2")
        await asyncio.sleep(1.2)
        await redis.hset(f"{redis_prefix}:canary:shop--acme:1-2", mapping={"r": "lots", "e": "-3"})
        for _ in range(3):
            a.counters.record("shop--acme", "1-2", 200, 0.01)
        await asyncio.sleep(1.2)
        assert a.window("shop--acme", "1-2") == (3, 0)  # garbage counts 0: its own stand
    finally:
        await a.close()


def test_the_ingress_still_refuses_any_upstream_but_loopback() -> None:
    """The port's backends carry a Service address on Kubernetes (for the gateway router);
    the ingress (the HAProxy data plane's table) still takes loopback only."""
    router = IngressRouter(RouteTable(), Counters())
    service = [Backend("1-1", 100, ("r1-1.appdeck-acme.svc:80", "r1-1.appdeck-acme.svc:80"))]
    assert service[0].upstreams == ("r1-1.appdeck-acme.svc:80",)  # one Service, listed once
    with pytest.raises(ValueError, match="is not"):
        router.route("shop--acme", service)
    with pytest.raises(ValueError, match="is not"):
        router.apply("shop--acme", service)
    assert router.table.get("shop--acme") is None
