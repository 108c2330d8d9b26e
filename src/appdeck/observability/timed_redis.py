"""Redis commands timed for ``appdeck_redis_seconds`` (:mod:`.storage`): a module of its own,
imported by replica mode only (``appdeck.common.outages`` says why redis-py is not imported by
every process)."""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from appdeck.observability.storage import STORAGE


class _TimedPipeline(Pipeline):
    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        started = time.perf_counter()
        try:
            return await super().execute(raise_on_error)
        finally:
            STORAGE.redis.observe(time.perf_counter() - started)


class TimedRedis(Redis):
    """A Redis client whose commands (and pipelines, one round trip each) are timed.

    redis-py has no event hooks (its own OpenTelemetry recorder is process-wide and needs an
    OTel meter provider); a subclass at the client is the smallest seam: the pub/sub reader's
    blocking waits (its own connection, through :class:`~redis.asyncio.client.PubSub`) stay
    out of the histogram, and nothing in ``events`` changes but the class it is given. The
    time includes waiting for a pooled connection: what the caller waits, while
    ``appdeck_redis_pool_connections`` tells a saturated pool from a slow server."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        started = time.perf_counter()
        try:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        finally:
            STORAGE.redis.observe(time.perf_counter() - started)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _TimedPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
