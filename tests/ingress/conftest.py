from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from appdeck.ingress import Counters, IngressServer, ProxyConfig, RouteTable
from tests.ingress.upstreams import Upstream

StartUpstream = Callable[[str], Awaitable[Upstream]]
StartIngress = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
def routes() -> RouteTable:
    return RouteTable(rng=random.Random(20240601))


@pytest.fixture
def counters() -> Counters:
    return Counters()


@pytest.fixture
async def upstream() -> AsyncIterator[StartUpstream]:
    """``await upstream("blue")``: a running test app; all are stopped after the test."""
    started: list[Upstream] = []

    async def start(name: str) -> Upstream:
        app = await Upstream(name).start()
        started.append(app)
        return app

    yield start
    await asyncio.gather(*(app.stop() for app in started))


@pytest.fixture
async def ingress(routes: RouteTable, counters: Counters) -> AsyncIterator[StartIngress]:
    """``client = await ingress(config)``: an ingress on a free port (over ``routes`` and
    ``counters``) and an httpx client pointed at it; both closed after the test."""
    servers: list[IngressServer] = []
    clients: list[httpx.AsyncClient] = []

    async def start(config: ProxyConfig | None = None, **options: Any) -> httpx.AsyncClient:
        server = IngressServer(
            routes, counters, port=0, config=config, graceful_shutdown=1, **options
        )
        port = await server.start()
        servers.append(server)
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5)
        client.ingress = server  # type: ignore[attr-defined]
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.aclose()
    await asyncio.gather(*(server.stop() for server in servers))
