"""Two protocol cores as two replicas would run them: each with its own PostgreSQL pool on one
database and its own Redis connection and RedisBroadcast under one prefix (real PostgreSQL,
real Redis). What issue 13 asks of sessions and client requests, end to end below HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from appdeck.events.signals import RedisBroadcast
from appdeck.protocol.call import Call
from appdeck.storage import Storage
from appdeck.storage.engine import create_engine
from appdeck.storage.sessions import SqlSessionStore
from tests.support.redis import connect

from .conftest import ALICE
from .doubles import RecordingChannel
from .replicas import Replica, elicitations, until


@pytest.fixture
async def replicas(
    postgres_module_database: str, redis_prefix: str
) -> AsyncIterator[tuple[Replica, Replica]]:
    storage = await Storage.open(postgres_module_database)  # migrates
    engines, clients, broadcasts, made = [], [], [], []
    try:
        for name in ("aaaa", "bbbb"):
            engine = create_engine(postgres_module_database)
            client = connect()
            broadcast = RedisBroadcast(client, redis_prefix)
            await broadcast.start()
            engines.append(engine)
            clients.append(client)
            broadcasts.append(broadcast)
            replica = Replica(name, SqlSessionStore(engine), broadcast, recheck_seconds=5.0)
            await replica.server.start()
            made.append(replica)
        yield made[0], made[1]
    finally:
        for replica in made:
            await replica.close()
        for broadcast in broadcasts:
            await broadcast.close()
        for client in clients:
            await client.aclose()
        for engine in engines:
            await engine.dispose()
        await storage.close()


async def test_an_elicitation_from_a_is_answered_through_b(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    session = await a.init(ALICE, {"elicitation": {}})
    channel = RecordingChannel()
    running = asyncio.create_task(
        a.request("tools/call", {"name": "ask", "arguments": {}}, Call(ALICE, session, channel))
    )
    await until(lambda: bool(elicitations(channel)))
    request_id = elicitations(channel)[0]["id"]
    answer = {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"action": "accept", "content": {"name": "Grace"}},
    }
    await b.server.handle_response(answer, await b.call(ALICE, session.id))
    async with asyncio.timeout(5):
        reply = await running
    assert reply["result"]["structuredContent"] == {"text": "hello Grace"}
    assert b.server.relay_dropped == 0


async def test_a_cancel_through_b_stops_a_call_on_a_within_a_second(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    session = await a.init(ALICE)
    running = asyncio.create_task(
        a.request("tools/call", {"name": "hold", "arguments": {}}, Call(ALICE, session), 41)
    )
    async with asyncio.timeout(5):
        await a.entered.wait()
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 41}}
    await b.server.handle_notification(cancel, await b.call(ALICE, session.id))
    async with asyncio.timeout(10):  # about 10 ms on a quiet machine
        await a.cancelled.wait()
        assert await running == {}


async def test_a_subscribe_on_a_and_a_level_set_on_b_are_one_session_everywhere(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    session = await a.init(ALICE)
    on_b = await b.call(ALICE, session.id)
    assert on_b.session is not None
    await a.request("resources/subscribe", {"uri": "test://a"}, await a.call(ALICE, session.id))
    await b.request("logging/setLevel", {"level": "error"}, on_b)
    async with asyncio.timeout(10):  # signals through Redis, re-read from PostgreSQL
        await until(lambda: session.log_level == "error", 10)
        await until(
            lambda: on_b.session is not None and on_b.session.subscriptions == {"test://a"}, 10
        )
    await b.server.resources.updated("test://a", tenant="acme")
    assert b.outbox.sent == [
        (
            session.id,
            {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"uri": "test://a"},
            },
        )
    ]


async def test_a_delete_on_b_ends_the_session_on_a_within_a_second(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    session = await a.init(ALICE)
    on_b = await b.call(ALICE, session.id)
    assert on_b.session is not None
    await b.sessions.drop(on_b.session)
    async with asyncio.timeout(10):  # about 10 ms on a quiet machine
        await until(lambda: a.dropped == [session.id], 10)
    assert a.sessions.cached(session.id) is None
