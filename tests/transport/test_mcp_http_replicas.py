"""GET streams across replicas: two or three servers on one PostgreSQL database and one Redis,
each behind its own uvicorn, their hubs on the Redis log, bus and leases (what app.py wires in
replica mode). Only the SSE streams are under test here; sessions live in the shared database.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from redis.asyncio import Redis

from appdeck.app import Services
from appdeck.events.bus import RedisBus
from appdeck.events.leases import RedisLeases
from appdeck.events.redis_log import RedisEventLog
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from appdeck.transport.http11 import CoalescingHttpToolsProtocol
from tests.conftest import _on_private_loop, _reset, _Template
from tests.support.mcp import (
    Event,
    TokenTable,
    headers,
    initialize,
    parse_sse,
    request,
    sse_events,
)
from tests.support.redis import REDIS_URL
from tests.support.wait import until
from tests.transport.conftest import TOKENS, register

TOKEN = "alice-token"
Replica = tuple[Services, httpx.AsyncClient]


def _note(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": n}}


async def resumed(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Two log lines, the POST stream closed in between (SEP-1699), then the answer."""
    await ctx.log("info", "before")
    await ctx.close_stream()
    await asyncio.sleep(0.3)  # the client is resuming on another replica meanwhile
    await ctx.log("info", "after")
    return {"content": [{"type": "text", "text": "done"}]}


async def asking(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """One question to the client (in a stateless task: through tasks/update)."""
    answer = await ctx.elicit("Go?", {"type": "object", "properties": {}})
    return {"content": [{"type": "text", "text": str(answer.get("action"))}]}


def _rewire(services: Services, lease_ttl: float) -> None:
    """Replica mode's stream pieces, in place of the embedded ones (the hub is shared by the
    server, the tasks and the HTTP app, so its parts are what to swap)."""
    cluster = services.cluster
    assert cluster.redis is not None
    hub = services.hub
    hub._log = RedisEventLog(cluster.redis, cluster.prefix, retention_seconds=600)
    hub._bus = RedisBus(cluster.broadcast)
    hub._leases = RedisLeases(cluster.redis, cluster.prefix, ttl_seconds=lease_ttl)


@asynccontextmanager
async def _replica(settings: Settings, lease_ttl: float) -> AsyncIterator[Replica]:
    services = await Services.start(settings, authenticator=TokenTable(TOKENS))
    register(services)
    services.registry.add_tool(ToolDef("resumed", "Resumed", {"type": "object"}, resumed))
    services.registry.add_tool(
        ToolDef("asking", "Asks", {"type": "object"}, asking, task_support="optional")
    )
    _rewire(services, lease_ttl)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        services.asgi(),
        http=CoalescingHttpToolsProtocol,
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started, within=10)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield services, client
    finally:
        server.should_exit = True
        async with asyncio.timeout(10):
            await task
        sock.close()
        await services.stop()


Cluster = Callable[..., Awaitable[list[Replica]]]


@pytest.fixture
async def replicas(
    postgres_module_database: str,
    _postgres_template: _Template,
    redis_prefix: str,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    # the newest schema, no rows (a few deletes, not a migration from zero: ~1.5 s each)
    _on_private_loop(_reset(postgres_module_database, _postgres_template))
    secret = secrets.token_hex(16)
    async with AsyncExitStack() as stack:

        async def start(
            count: int = 3, lease_ttl: float = 10.0, stateless: bool = False
        ) -> list[Replica]:
            out = []
            for n in range(count):
                settings = Settings(
                    data_dir=tmp_path / f"r{n}",
                    database_url=postgres_module_database,
                    redis_url=REDIS_URL,
                    redis_prefix=redis_prefix,
                    secret_key=secret,
                    keepalive_seconds=0.5,
                    sse_retry_ms=50,
                    stateless_era=stateless,
                )
                out.append(await stack.enter_async_context(_replica(settings, lease_ttl)))
            return out

        yield start


def _get(sid: str, last_event_id: str | None = None) -> dict[str, str]:
    out = headers(sid, TOKEN)
    out["accept"] = "text/event-stream"
    if last_event_id is not None:
        out["last-event-id"] = last_event_id
    return out


async def test_notifications_sent_on_a_reach_a_get_stream_on_c_exactly_once_in_order(
    replicas: Cluster,
) -> None:
    (a, _), (b, via_b), (_, via_c) = await replicas()
    sid = await initialize(via_b, TOKEN)
    seen: list[Event] = []

    async def send_all() -> None:
        for n in range(1, 1001):
            await (a if n % 2 else b).hub.to_session(sid, _note(n))

    async with asyncio.timeout(60), via_c.stream("GET", "/mcp", headers=_get(sid)) as r:
        assert r.status_code == 200
        sender: asyncio.Task[None] | None = None
        async for event in sse_events(r, 1001):
            if sender is None:  # the priming event: the stream listens
                sender = asyncio.create_task(send_all())
                continue
            seen.append(event)
        assert sender is not None
        await sender
    assert [e.json()["params"]["data"] for e in seen] == list(range(1, 1001))
    assert [e.id for e in seen] == [f"g.{n}" for n in range(1, 1001)]


async def test_a_broken_get_stream_resumes_on_another_replica_after_last_event_id(
    replicas: Cluster,
) -> None:
    (a, via_a), (_, via_b) = await replicas(2)
    sid = await initialize(via_a, TOKEN)
    async with asyncio.timeout(10), via_a.stream("GET", "/mcp", headers=_get(sid)) as r:
        await a.hub.to_session(sid, _note(1))
        first = [e async for e in sse_events(r, 2)]
    assert first[1].id == "g.1"
    for n in range(2, 5):  # while no stream is open
        await a.hub.to_session(sid, _note(n))
    async with asyncio.timeout(10), via_b.stream("GET", "/mcp", headers=_get(sid, "g.1")) as r:
        assert r.status_code == 200
        again = [e async for e in sse_events(r, 3)]
    assert [e.json()["params"]["data"] for e in again] == [2, 3, 4]
    assert [e.id for e in again] == ["g.2", "g.3", "g.4"]


async def test_a_second_get_on_another_replica_is_409_and_free_again_once_the_first_ends(
    replicas: Cluster,
) -> None:
    (_, via_a), (_, via_b), (c, via_c) = await replicas()
    sid = await initialize(via_a, TOKEN)
    async with asyncio.timeout(10), via_c.stream("GET", "/mcp", headers=_get(sid)) as first:
        assert first.status_code == 200
        assert (await via_b.get("/mcp", headers=_get(sid))).status_code == 409
        assert (await via_a.get("/mcp", headers=_get(sid))).status_code == 409
    await until(lambda: not c.hub._standalone.get(sid), within=10)
    async with asyncio.timeout(10), via_b.stream("GET", "/mcp", headers=_get(sid)) as second:
        assert second.status_code == 200


async def test_a_dead_holders_get_lease_expires_and_a_get_elsewhere_works_within_the_ttl(
    replicas: Cluster, redis_prefix: str
) -> None:
    (a, via_a), (_, via_b) = await replicas(2, lease_ttl=1.0)
    sid = await initialize(via_a, TOKEN)
    # a holder that died without releasing: its lease is there, nobody renews it
    dead = RedisLeases(a.cluster.redis, redis_prefix, ttl_seconds=1.0)  # type: ignore[arg-type]
    assert await dead.acquire(f"{sid}:g") is not None
    assert (await via_b.get("/mcp", headers=_get(sid))).status_code == 409
    await asyncio.sleep(1.2)  # past the ttl: nobody renewed it
    async with asyncio.timeout(10), via_b.stream("GET", "/mcp", headers=_get(sid)) as r:
        assert r.status_code == 200


async def test_delete_on_a_closes_the_sessions_get_stream_on_c(replicas: Cluster) -> None:
    (_, via_a), _, (_, via_c) = await replicas()
    sid = await initialize(via_a, TOKEN)
    async with asyncio.timeout(10), via_c.stream("GET", "/mcp", headers=_get(sid)) as r:
        body = r.aiter_bytes()
        await anext(body)  # the priming event
        assert (await via_a.delete("/mcp", headers=headers(sid, TOKEN))).status_code == 200
        rest = [chunk async for chunk in body]  # ends: the stream was closed
    assert b"data: {" not in b"".join(rest)


async def test_a_primed_post_stream_closed_on_a_is_resumed_on_b(replicas: Cluster) -> None:
    (_, via_a), (_, via_b) = await replicas(2)
    sid = await initialize(via_a, TOKEN)
    call = request("tools/call", {"name": "resumed", "arguments": {}}, id=7)
    r = await via_a.post("/mcp", json=call, headers=headers(sid, TOKEN))
    first = [e for e in _parse(r.text) if e.id is not None]
    priming = first[0]
    assert priming.data == ""
    assert priming.id is not None
    async with (
        asyncio.timeout(10),
        via_b.stream("GET", "/mcp", headers=_get(sid, priming.id)) as resumed_on_b,
    ):
        assert resumed_on_b.status_code == 200
        events = [e async for e in sse_events(resumed_on_b, 3)]
    stream = priming.id.split(".")[0]
    assert [e.id for e in events] == [f"{stream}.1", f"{stream}.2", f"{stream}.3"]
    assert events[0].json()["params"]["data"] == "before"
    assert events[1].json()["params"]["data"] == "after"
    assert events[2].json()["id"] == 7
    assert events[2].json()["result"]["content"][0]["text"] == "done"


def _parse(text: str) -> list[Event]:
    return parse_sse(text)


async def test_a_last_event_id_past_the_streams_tail_loses_none_of_the_next_events(
    replicas: Cluster,
) -> None:
    (a, via_a), (_, via_b) = await replicas(2)
    sid = await initialize(via_a, TOKEN)
    await a.hub.to_session(sid, _note(1))
    async with asyncio.timeout(10), via_b.stream("GET", "/mcp", headers=_get(sid, "g.999")) as r:
        assert r.status_code == 200
        await a.hub.to_session(sid, _note(2))
        events = [e async for e in sse_events(r, 1)]
    assert [(e.id, e.json()["params"]["data"]) for e in events] == [("g.2", 2)]


class SilentLog(RedisEventLog):
    """Appends to the shared log but rings its doorbells where nobody listens: a lost
    pub/sub message, as during a dropped connection."""

    def _doorbells(self, session_id: str) -> str:
        return f"{self._prefix}:b:nowhere"


async def test_a_lost_doorbell_costs_latency_never_an_event(
    replicas: Cluster, redis_prefix: str
) -> None:
    (a, via_a), (_, via_c) = await replicas(2)
    assert a.cluster.redis is not None
    silent = SilentLog(a.cluster.redis, redis_prefix, retention_seconds=600)
    sid = await initialize(via_a, TOKEN)
    async with asyncio.timeout(10), via_c.stream("GET", "/mcp", headers=_get(sid)) as r:
        events = sse_events(r, 4)
        await anext(events)  # the priming event: the stream listens
        await silent.append(sid, "g", orjson.dumps(_note(1)))
        await a.hub.to_session(sid, _note(2))  # seq 2 seen live: 1 is read back first
        got = [await anext(events), await anext(events)]
        await silent.append(sid, "g", orjson.dumps(_note(3)))  # nothing follows it
        got.append(await anext(events))  # found at the next keepalive (0.5 s)
    assert [(e.id, e.json()["params"]["data"]) for e in got] == [
        ("g.1", 1),
        ("g.2", 2),
        ("g.3", 3),
    ]


async def test_a_get_while_redis_is_unreachable_is_503_with_a_retry_after(
    replicas: Cluster, redis_prefix: str
) -> None:
    (_, via_a), (b, via_b) = await replicas(2)
    sid = await initialize(via_a, TOKEN)
    unreachable = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    b.hub._leases = RedisLeases(unreachable, redis_prefix)
    try:
        r = await via_b.get("/mcp", headers=_get(sid))
        assert r.status_code == 503
        assert r.headers["retry-after"] == "1"
    finally:
        await unreachable.aclose()


async def test_a_client_resuming_after_its_replica_died_gets_its_stream_at_once(
    replicas: Cluster, redis_prefix: str
) -> None:
    (a, via_a), (_, via_b) = await replicas(2)  # leases of 10 s
    sid = await initialize(via_a, TOKEN)
    await a.hub.to_session(sid, _note(1))
    await a.hub.to_session(sid, _note(2))
    dead = RedisLeases(a.cluster.redis, redis_prefix)  # type: ignore[arg-type]
    assert await dead.acquire(f"{sid}:g") is not None  # C died holding the stream
    assert (await via_b.get("/mcp", headers=_get(sid))).status_code == 409  # a new GET
    # "at once": before the dead holder's 10 s lease could have run out (5 s was too tight for
    # a loaded machine running two suites side by side)
    async with asyncio.timeout(9), via_b.stream("GET", "/mcp", headers=_get(sid, "g.1")) as r:
        assert r.status_code == 200
        events = [e async for e in sse_events(r, 1)]
    assert [(e.id, e.json()["params"]["data"]) for e in events] == [("g.2", 2)]


async def test_a_live_holder_closes_when_its_client_resumes_on_another_replica(
    replicas: Cluster,
) -> None:
    (a, via_a), (_, via_b), (_, via_c) = await replicas()
    sid = await initialize(via_a, TOKEN)
    async with asyncio.timeout(10), via_c.stream("GET", "/mcp", headers=_get(sid)) as old:
        body = old.aiter_bytes()
        await anext(body)  # the priming event: C holds the stream
        async with via_b.stream("GET", "/mcp", headers=_get(sid, "g.0")) as resumed:
            assert resumed.status_code == 200
            rest = [chunk async for chunk in body]  # C's stream ends (the Taken doorbell)
            await a.hub.to_session(sid, _note(1))
            events = [e async for e in sse_events(resumed, 1)]
    assert b"data: {" not in b"".join(rest)
    assert [(e.id, e.json()["params"]["data"]) for e in events] == [("g.1", 1)]


async def test_a_get_whose_log_is_unreachable_is_503_and_leaves_the_stream_free(
    replicas: Cluster, redis_prefix: str
) -> None:
    (_, via_a), (b, via_b) = await replicas(2)
    sid = await initialize(via_a, TOKEN)
    working = b.hub._log
    unreachable = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    b.hub._log = RedisEventLog(unreachable, redis_prefix, retention_seconds=60)
    try:
        assert (await via_b.get("/mcp", headers=_get(sid))).status_code == 503
    finally:
        b.hub._log = working
        await unreachable.aclose()
    async with asyncio.timeout(10), via_a.stream("GET", "/mcp", headers=_get(sid)) as r:
        assert r.status_code == 200  # the refused GET released its lease


TASKS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    },
}


async def _stateless(client: httpx.AsyncClient, method: str, **params: Any) -> dict[str, Any]:
    routing = {"mcp-protocol-version": "2026-07-28", "mcp-method": method}
    name = params.get("name") or params.get("taskId")
    if name is not None:
        routing["mcp-name"] = name
    r = await client.post(
        "/mcp",
        json=request(method, {**params, "_meta": TASKS_META}),
        headers=headers(token=TOKEN, **routing),
    )
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()["result"]
    return result


async def _polled(client: httpx.AsyncClient, task_id: str, status: str) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            task = await _stateless(client, "tasks/get", taskId=task_id)
            if task["status"] == status:
                return task
            await asyncio.sleep(0.05)


async def test_a_stateless_task_created_on_a_is_answered_on_b_read_and_cancelled_on_c(
    replicas: Cluster,
) -> None:
    (_, a), (_, b), (_, c) = await replicas(3, stateless=True)
    created = await _stateless(a, "tools/call", name="asking", arguments={})
    assert created["resultType"] == "task"
    waiting = await _polled(c, created["taskId"], "input_required")
    [key] = waiting["inputRequests"]
    answer = {key: {"action": "accept", "content": {}}}
    await _stateless(b, "tasks/update", taskId=created["taskId"], inputResponses=answer)
    done = await _polled(c, created["taskId"], "completed")
    assert done["result"]["content"] == [{"type": "text", "text": "accept"}]

    second = await _stateless(a, "tools/call", name="asking", arguments={})
    await _polled(b, second["taskId"], "input_required")
    ack = await _stateless(c, "tasks/cancel", taskId=second["taskId"])
    assert ack["resultType"] == "complete"
    await _polled(a, second["taskId"], "cancelled")
