"""A real HAProxy data plane per test (Debian's haproxy, installed by ``make``), on a free
port, with its files in a short temporary directory (unix socket paths are short)."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.haproxy.config import Layout
from appdeck.ingress.haproxy.plane import HAProxyCounters, HAProxyDataPlane, HAProxyTable

StartPlane = Callable[..., Awaitable[tuple[HAProxyDataPlane, httpx.AsyncClient]]]


@pytest.fixture
def run_dir() -> AsyncIterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="hx", dir="/tmp"))
    yield directory  # type: ignore[misc]
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def plane(run_dir: Path) -> AsyncIterator[StartPlane]:
    """``plane, client = await plane(config)``: a data plane over a fresh table; every
    HAProxy started is stopped after the test."""
    planes: list[HAProxyDataPlane] = []
    clients: list[httpx.AsyncClient] = []

    async def start(
        proxy: ProxyConfig | None = None, *, port: int = 0, **options: Any
    ) -> tuple[HAProxyDataPlane, httpx.AsyncClient]:
        table = options.pop("table", None) or HAProxyTable(rng=random.Random(7))
        data_plane = HAProxyDataPlane(
            table,
            HAProxyCounters(),
            Layout(run_dir / "haproxy"),
            port=port,
            proxy=proxy,
            **options,
        )
        await data_plane.start()
        data_plane.settle()
        planes.append(data_plane)
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{data_plane.port}", timeout=10)
        clients.append(client)
        return data_plane, client

    yield start
    for client in clients:
        await client.aclose()
    for data_plane in planes:  # no watchdog left to start it again
        await data_plane.stop()
    if planes:
        await planes[0].stop(haproxy=True)
