"""subscriptions/listen over HTTP (MCP 2026-07-28): a real uvicorn holding the SSE stream open,
changes caused on other connections (and, with Redis, through another replica) arriving on it,
the server's shutdown ending it with the response, the client's disconnect freeing it."""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from appdeck.app import Services
from appdeck.fixtures.stateless import triggers
from appdeck.protocol.listen import ACKNOWLEDGED, SUBSCRIPTION_ID
from appdeck.settings import Settings
from appdeck.transport.http11 import CoalescingHttpToolsProtocol
from tests.conftest import _empty_public_schema, _on_private_loop
from tests.support.mcp import TokenTable, headers, request
from tests.support.redis import REDIS_URL
from tests.support.wait import until
from tests.transport.conftest import TOKENS, register

TOKEN = "alice-token"
V = "2026-07-28"
Replica = tuple[Services, httpx.AsyncClient]


def _body(method: str, params: dict[str, Any], rid: Any = 1) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return request(method, {**params, "_meta": meta}, rid)


def _headers(method: str, name: str | None = None) -> dict[str, str]:
    out = headers(token=TOKEN, **{"mcp-protocol-version": V, "mcp-method": method})
    if name is not None:
        out["mcp-name"] = name
    return out


async def _call(client: httpx.AsyncClient, tool: str) -> dict[str, Any]:
    r = await client.post(
        "/mcp",
        json=_body("tools/call", {"name": tool, "arguments": {}}),
        headers=_headers("tools/call", tool),
    )
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


class Listening:
    """A listen stream read in the background: its JSON frames, and the comment lines."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.comments = 0
        self.status = 0
        self.headers: httpx.Headers | None = None
        self.ended = False

    def methods(self) -> list[str | None]:
        return [f.get("method") for f in self.frames]


@asynccontextmanager
async def _listening(
    client: httpx.AsyncClient, notifications: dict[str, Any], rid: Any = "L1"
) -> AsyncIterator[Listening]:
    out = Listening()

    async def read() -> None:
        async with client.stream(
            "POST",
            "/mcp",
            json=_body("subscriptions/listen", {"notifications": notifications}, rid),
            headers=_headers("subscriptions/listen"),
            timeout=httpx.Timeout(10, read=None),
        ) as r:
            out.status, out.headers = r.status_code, r.headers
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    out.frames.append(orjson.loads(line[5:]))
                elif line.startswith(":"):
                    out.comments += 1
        out.ended = True

    reader = asyncio.create_task(read())
    try:
        await until(lambda: out.frames or reader.done(), within=15)
        if reader.done():
            reader.result()
        yield out
    finally:
        reader.cancel()
        with suppress(asyncio.CancelledError):
            await reader


@asynccontextmanager
async def _served(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    """``services`` behind a real uvicorn on a loopback port (as appdeck serve runs it)."""
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
            yield client
    finally:
        server.should_exit = True
        async with asyncio.timeout(10):
            await task
        sock.close()


async def _start(settings: Settings) -> Services:
    services = await Services.start(settings, authenticator=TokenTable(TOKENS))
    register(services)
    for tool in triggers(services.server.listen):
        services.registry.add_tool(tool)
    return services


@pytest.fixture
async def one(database_url: str, tmp_path: Path) -> AsyncIterator[Replica]:
    settings = Settings(
        data_dir=tmp_path, database_url=database_url, stateless_era=True, keepalive_seconds=0.3
    )
    services = await _start(settings)
    try:
        async with _served(services) as client:
            yield services, client
    finally:
        await services.stop()


async def test_a_listen_stream_is_acked_then_hears_what_it_asked_for(one: Replica) -> None:
    services, client = one
    uri = "test://items/3"
    async with _listening(
        client, {"toolsListChanged": True, "resourceSubscriptions": [uri, "test://nothing"]}
    ) as stream:
        assert stream.status == 200
        assert stream.headers is not None
        assert stream.headers["content-type"] == "text/event-stream"
        assert stream.headers["x-accel-buffering"] == "no"
        ack = stream.frames[0]
        assert ack["method"] == ACKNOWLEDGED
        assert ack["params"]["_meta"] == {SUBSCRIPTION_ID: "L1"}
        assert ack["params"]["notifications"] == {
            "toolsListChanged": True,
            "resourceSubscriptions": [uri],
        }
        assert "result" in await _call(client, "test_trigger_prompt_change")  # not asked for
        assert "result" in await _call(client, "test_trigger_tool_change")
        await services.server.resources.updated(uri, tenant="acme")
        await until(lambda: len(stream.frames) == 3)
        assert stream.methods()[1:] == [
            "notifications/tools/list_changed",
            "notifications/resources/updated",
        ]
        assert all(f["params"]["_meta"] == {SUBSCRIPTION_ID: "L1"} for f in stream.frames)
        assert stream.frames[2]["params"]["uri"] == uri
        await until(lambda: stream.comments > 0)  # keepalives while nothing happens


async def test_the_server_s_shutdown_ends_the_stream_with_the_response(one: Replica) -> None:
    services, client = one
    async with _listening(client, {"promptsListChanged": True}, rid=41) as stream:
        services.drain()
        await until(lambda: stream.ended)
        last = stream.frames[-1]
        assert last["id"] == 41
        assert last["result"]["resultType"] == "complete"
        assert last["result"]["_meta"][SUBSCRIPTION_ID] == 41


async def test_a_client_that_goes_away_frees_its_stream(one: Replica) -> None:
    services, client = one
    async with _listening(client, {"toolsListChanged": True}):
        assert services.server.listen.open_streams == 1
    await until(lambda: services.server.listen.open_streams == 0)


async def test_a_refused_listen_is_a_plain_json_error(one: Replica) -> None:
    _, client = one
    r = await client.post(
        "/mcp",
        json=_body("subscriptions/listen", {"notifications": {"taskIds": ["t1"]}}),
        headers=_headers("subscriptions/listen"),
    )
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["code"] == -32021


async def test_the_handshake_era_has_no_listen(one: Replica) -> None:
    _, client = one
    r = await client.post(
        "/mcp",
        json=request("subscriptions/listen", {"notifications": {"toolsListChanged": True}}),
        headers=headers(token=TOKEN),
    )
    assert r.status_code == 400  # no session: the handshake era's rule, unchanged


@pytest.fixture
async def replicas(
    postgres_module_database: str, redis_prefix: str, tmp_path: Path
) -> AsyncIterator[list[Replica]]:
    _on_private_loop(_empty_public_schema(postgres_module_database))
    secret = secrets.token_hex(16)
    async with AsyncExitStack() as stack:
        out = []
        for n in range(3):
            settings = Settings(
                data_dir=tmp_path / f"r{n}",
                database_url=postgres_module_database,
                redis_url=REDIS_URL,
                redis_prefix=redis_prefix,
                secret_key=secret,
                stateless_era=True,
                keepalive_seconds=0.5,
            )
            services = await _start(settings)
            stack.push_async_callback(services.stop)
            out.append((services, await stack.enter_async_context(_served(services))))
        yield out


async def test_a_change_made_through_a_reaches_a_listen_stream_on_c_once(
    replicas: list[Replica],
) -> None:
    (a, via_a), _, (c, via_c) = replicas
    uri = "test://items/9"
    notifications = {"toolsListChanged": True, "resourceSubscriptions": [uri]}
    async with _listening(via_c, notifications) as stream:
        assert c.server.listen.open_streams == 1
        assert a.server.listen.open_streams == 0
        assert "result" in await _call(via_a, "test_trigger_tool_change")
        await a.server.resources.updated(uri, tenant="other")  # another tenant's: not heard
        await a.server.resources.updated(uri, tenant="acme")
        await until(lambda: len(stream.frames) >= 3)
        assert stream.methods() == [
            ACKNOWLEDGED,
            "notifications/tools/list_changed",
            "notifications/resources/updated",
        ]
        assert all(f["params"]["_meta"] == {SUBSCRIPTION_ID: "L1"} for f in stream.frames)
        # a later change proves nothing else (a duplicate, the other tenant's) was on its way
        await a.server.listen.prompts_changed()
        assert "result" in await _call(via_a, "test_trigger_tool_change")
        await until(lambda: len(stream.frames) >= 4)
        assert stream.methods()[3:] == ["notifications/tools/list_changed"]
