"""Real Redis for tests (``APPDECK_TEST_REDIS_URL``, default the local server): each test gets
its own key prefix and its keys are deleted afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import pytest
from redis.asyncio import Redis

from appdeck.events.cluster import bounded

REDIS_URL = os.environ.get("APPDECK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

TIMEOUT = 60.0
"""Seconds a test's Redis connect or command may take. redis-py's default is 5 s, and a loaded
2-core CI machine missed it: a test that gathers 200 appends opened 200 connections at once and
one handshake timed out (``Timeout connecting to server``). Tests bound their own waits."""

POOL_SIZE = 16
"""Connections per test client: a burst of concurrent commands queues for one of these instead
of opening a connection per command, as the server's own pool does."""

R = TypeVar("R", bound=Redis)


def connect(
    url: str = REDIS_URL,
    *,
    cls: type[R] = Redis,  # type: ignore[assignment]
    **kwargs: Any,
) -> R:
    """A test client on a bounded pool with generous timeouts (see :data:`TIMEOUT`)."""
    return bounded(url, POOL_SIZE, TIMEOUT, cls=cls, **kwargs)


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    client: Redis = connect()
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def redis(redis_prefix: str) -> AsyncIterator[Redis]:
    client: Redis = connect()
    yield client
    await client.aclose()
