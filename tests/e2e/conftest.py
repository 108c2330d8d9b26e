"""End-to-end fixtures: a real ``appdeck serve`` process per test (see tests/support)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tests.support.appdeck_process import AppDeckProcess, start_appdeck

Launcher = Callable[..., Awaitable[AppDeckProcess]]


@pytest.fixture
async def launch_appdeck(tmp_path: Path) -> AsyncIterator[Launcher]:
    """Starts servers on demand (``await launch_appdeck(data_dir=None)``); stops every one it
    started at teardown (SIGTERM, then SIGKILL after a bound)."""
    started: list[AppDeckProcess] = []

    async def launch(data_dir: Path | None = None) -> AppDeckProcess:
        server = await start_appdeck(
            data_dir or tmp_path / "data",
            log_dir=tmp_path / "logs",
            name=f"appdeck{len(started)}",
        )
        started.append(server)
        return server

    yield launch
    for server in reversed(started):
        await server.stop()


@pytest.fixture
async def appdeck(launch_appdeck: Launcher) -> AppDeckProcess:
    """One running server with the conformance fixtures, on a fresh data directory; its
    ``url`` and the ``auth_headers`` every request needs."""
    return await launch_appdeck()


@pytest.fixture
def server_url(appdeck: AppDeckProcess) -> str:
    """``http://127.0.0.1:PORT/mcp`` of a running server (see ``appdeck`` for its token)."""
    return appdeck.url
