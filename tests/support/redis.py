"""Real Redis for tests (``APPDECK_TEST_REDIS_URL``, default the local server): each test gets
its own key prefix and its keys are deleted afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

REDIS_URL = os.environ.get("APPDECK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    client = Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def redis(redis_prefix: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()
