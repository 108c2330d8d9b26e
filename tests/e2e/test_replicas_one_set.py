"""Issue 13's must-show, continued: the stories that leave their replica set as they found
it (no replica killed, stopped or paused, no rate-limit bucket spent), on one set of three
``appdeck serve`` replicas shared by this module's tests (test_replicas_story.py has those
that need a fresh set). Each test gets the set with every replica running and the proxy's
record of routed requests emptied (:meth:`Replicas.for_next_test`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp.types as types
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.helpers import Inbox, official_client, rpc
from tests.e2e.replica_streams import Numbered, http_to, start_count
from tests.support.mcp import headers, initialize, parse_sse, request
from tests.support.redis import redis_keys
from tests.support.replicas import Replicas, run_replicas
from tests.support.wait import until

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_replicas(
    postgres_module_database: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Replicas]:
    tmp_path: Path = tmp_path_factory.mktemp("replicas")
    async with (
        redis_keys() as redis_prefix,
        run_replicas(postgres_module_database, redis_prefix, tmp_path) as started,
    ):
        yield started


@pytest.fixture
def replicas(shared_replicas: Replicas) -> Replicas:
    return shared_replicas.for_next_test()


async def test_one_session_is_served_by_all_three_replicas(replicas: Replicas) -> None:
    inbox = Inbox()
    async with asyncio.timeout(180), official_client(replicas, inbox) as client:  # type: ignore[arg-type]
        for _ in range(6):
            tools = await client.list_tools()
            assert any(t.name == "appdeck_test_count" for t in tools.tools)
    served = {r.upstream for r in replicas.proxy.routed if r.method == "POST" and r.status < 300}
    assert served == set(replicas.proxy.upstreams), replicas.proxy.routed
    assert inbox.errors == []


async def test_every_replica_reports_itself_healthy_with_its_own_instance(
    replicas: Replicas,
) -> None:
    seen = set()
    async with httpx.AsyncClient(timeout=10) as http:
        for server in replicas.servers:
            body = (await http.get(f"{server.origin}/healthz")).json()
            assert body["status"] == "ok"
            seen.add(body["instance"])
    assert len(seen) == 3


# -- 3. tasks: read anywhere, cancel anywhere ------------------------------------------------


async def test_a_task_on_a_is_read_via_b_and_c_and_cancelled_via_b(replicas: Replicas) -> None:
    a, b, c = replicas.servers
    token = replicas.token
    async with (
        http_to(replicas.origin, token) as lb,
        http_to(a.origin, token) as on_a,
        http_to(b.origin, token) as on_b,
        http_to(c.origin, token) as on_c,
    ):
        sid = await initialize(on_a)
        reader = Numbered(lb, sid)  # the task's notifications, on C's GET stream
        listening = asyncio.create_task(reader.read(lambda r: False, within=300))
        try:
            # the GET is open on C (listening before its 200) before the task starts
            await until(lambda: reader.connections >= 1, within=60)
            created = await start_count(on_a, sid, 10_000, per_second=100, task=True)
            task_id = created["result"]["task"]["taskId"]
            for http in (on_b, on_c):
                got = await rpc(http, sid, "tasks/get", {"taskId": task_id}, id=3)
                assert got["result"]["status"] == "working", got
            await reader.wait_for(50, within=60)  # A is counting, C is delivering
            before = reader.numbers[-1]
            cancelled = await rpc(on_b, sid, "tasks/cancel", {"taskId": task_id}, id=4)
            assert cancelled["result"]["status"] == "cancelled", cancelled
            # the stream goes quiet (what A sent before the cancel may still be on its way)...
            async with asyncio.timeout(120):
                while True:
                    seen = len(reader.numbers)
                    await asyncio.sleep(2.5)  # past A's 2 s backstop re-read
                    if len(reader.numbers) == seen:
                        break
            # ...and A stopped far short of the 10,000 it would count: a count, not a time
            # (about a second, 100 numbers, on a quiet machine; C's delivery lags A's counting
            # by what a loaded machine makes of it, so up to 10 s of counting is allowed)
            assert reader.numbers[-1] - before <= 1000, (before, reader.numbers[-1])
            assert reader.numbers == list(range(1, len(reader.numbers) + 1))
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await listening
        for http in (on_a, on_b, on_c):
            got = await rpc(http, sid, "tasks/get", {"taskId": task_id}, id=5)
            assert got["result"]["status"] == "cancelled", got


# -- 5. requests to the client, answered and cancelled anywhere ----------------------------


async def test_an_elicitation_from_one_replica_is_answered_through_another(
    replicas: Replicas,
) -> None:
    asked: list[str] = []

    async def accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"username": "ada"})

    http = httpx2.AsyncClient(headers=replicas.auth_headers, timeout=httpx2.Timeout(10, read=60))
    async with (
        asyncio.timeout(180),
        http,
        Client(
            streamable_http_client(replicas.url, http_client=http),
            mode="legacy",
            elicitation_callback=accept,
        ) as client,
    ):
        for _ in range(3):
            result = await client.call_tool("test_elicitation", {"message": "Who are you?"})
            assert not result.is_error, result
            assert "action=accept" in str(result.content[0]), result
    assert asked == ["Who are you?"] * 3
    posts = [r for r in replicas.proxy.routed if r.method == "POST"]
    calls = [i for i, r in enumerate(posts) if r.what == "request:tools/call"]
    answered_elsewhere = [
        i
        for i in calls
        if posts[i + 1].what == "response" and posts[i + 1].upstream != posts[i].upstream
    ]
    assert answered_elsewhere, posts  # round-robin: each answer went to another replica


async def test_a_cancel_sent_to_b_stops_a_call_running_on_a(replicas: Replicas) -> None:
    a, b, _c = replicas.servers
    token = replicas.token
    async with http_to(a.origin, token) as on_a, http_to(b.origin, token) as on_b:
        sid = await initialize(on_a)
        reader = Numbered(on_a, sid)
        params = {"name": "appdeck_test_count", "arguments": {"count": 10_000, "per_second": 100}}
        ended = asyncio.Event()

        async def call() -> None:
            async with on_a.stream(
                "POST", "/mcp", json=request("tools/call", params, 11), headers=headers(sid)
            ) as response:
                buffer = ""
                async for chunk in response.aiter_text():
                    buffer += chunk.replace("\r\n", "\n")
                    while "\n\n" in buffer:
                        block, buffer = buffer.split("\n\n", 1)
                        reader._take(parse_sse(block + "\n\n"))
                        reader._grew.set()
            ended.set()

        calling = asyncio.create_task(call())
        try:
            await reader.wait_for(30, within=60)
            before = reader.numbers[-1]
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 11, "reason": "changed my mind"},
            }
            sent = await on_b.post("/mcp", json=cancel, headers=headers(sid))
            assert sent.status_code == 202, sent.text
            async with asyncio.timeout(120):
                await ended.wait()
            # A stopped far short of the 10,000 it would count: bounded by A's own count
            # (100/s), not by the wall clock of a loaded machine (about 100 on a quiet one)
            assert reader.numbers[-1] - before <= 1000, (before, reader.numbers[-1])
        finally:
            calling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await calling
        assert len(reader.numbers) < 10_000
        assert reader.responses == []  # a cancelled request gets no response
