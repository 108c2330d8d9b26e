from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.ingress.upstreams import Upstream

StartUpstream = Callable[[str], Awaitable[Upstream]]


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
