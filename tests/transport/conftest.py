from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from appdeck.app import Services
from appdeck.common.identity import Principal
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ResourceTemplateDef, ToolDef
from appdeck.settings import Settings
from appdeck.transport.http11 import HttpLimits, bounded_protocol
from tests.support.mcp import TokenTable
from tests.support.wait import until

ALICE = Principal("acme", "alice", frozenset({"apps:read"}), kind="oauth")
BOB = Principal("acme", "bob", frozenset({"apps:read"}), kind="oauth")
TOKENS = {"alice-token": ALICE, "bob-token": BOB}


def _text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


async def echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return _text(str(args.get("text", "")))


async def chatty(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    for step in range(1, 4):
        await ctx.progress(step, 3, f"step {step}")
    return _text("chatty done")


async def hangup(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Sends one event, closes the POST stream (SEP-1699), then keeps working."""
    await ctx.log("info", "before the hang-up")
    await ctx.close_stream()
    await asyncio.sleep(0.2)
    await ctx.log("info", "after the hang-up")
    return _text("finished after hang-up")


async def read_item(uri: str, v: dict[str, str], ctx: ToolContext) -> list[dict[str, Any]]:
    return [{"uri": uri, "text": v["id"]}]


def register(services: Services) -> None:
    reg = services.registry
    obj: dict[str, Any] = {"type": "object"}
    reg.add_tool(ToolDef("echo", "Echo", obj, echo, task_support="optional"))
    reg.add_tool(ToolDef("chatty", "Progress", obj, chatty))
    reg.add_tool(ToolDef("hangup", "Closes its stream", obj, hangup))
    reg.add_template(ResourceTemplateDef("test://items/{id}", "item", read_item))


@pytest.fixture
async def services(database_url: str, tmp_path: Path) -> AsyncIterator[Services]:
    settings = Settings(
        data_dir=tmp_path,
        database_url=database_url,
        keepalive_seconds=0.3,
        sse_retry_ms=50,
        max_body_bytes=64 * 1024,
    )
    async with running(settings) as svc:
        yield svc


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Services]:
    """Services on ``settings`` with the test tokens and tools, stopped afterwards."""
    svc = await Services.start(settings, authenticator=TokenTable(TOKENS))
    register(svc)
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.fixture
async def client(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=services.asgi())
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture
async def live(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    """The same services behind a real uvicorn on a loopback port (needed for streaming)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        services.asgi(),
        http=bounded_protocol(HttpLimits()),  # as appdeck serve runs it: limits, coalescing
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await until(lambda: server.started, within=10)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        yield c
    server.should_exit = True
    async with asyncio.timeout(10):
        await task
    sock.close()
