"""What one replica knows of the others: its own id, the broadcast, and Redis when shared.

Built once by the composition root (``appdeck.app``). ``redis`` is None for the embedded
default (one process, in-process bus); then ``broadcast`` is a :class:`LocalBroadcast`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from appdeck.events.signals import LocalBroadcast, RedisBroadcast

if TYPE_CHECKING:  # imported by replica mode only (appdeck.common.outages)
    from redis.asyncio import Redis

REDIS_TIMEOUT = 5.0
"""Seconds a Redis command or connect may take before it fails (and the caller's fallback or
error path runs): a stalled Redis must not hang requests forever."""

REDIS_CONNECTIONS = 64
"""Connections one replica keeps to Redis at most. A burst of concurrent requests waits (up to
:data:`REDIS_TIMEOUT`) for a free connection instead of opening one each: hundreds of handshakes
at once are what timed out on a loaded machine, and each costs Redis a client."""


R = TypeVar("R", bound="Redis")


def bounded(
    url: str,
    connections: int,
    timeout: float,
    *,
    cls: type[R],
    **options: Any,
) -> R:
    """A ``cls`` client (a redis-py ``Redis``) on a pool of at most ``connections``: a command
    waits up to ``timeout`` for a free one, and connects and commands time out after ``timeout``
    too. The client owns the pool (``aclose`` closes it)."""
    from redis.asyncio import BlockingConnectionPool

    from appdeck.events.redis_cancels import keeping_cancels

    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        **options,
    )
    pool.connection_class = keeping_cancels(pool.connection_class)  # see that module
    return cast(R, cls.from_pool(pool))


@dataclass(frozen=True, slots=True)
class Cluster:
    instance_id: str
    broadcast: LocalBroadcast | RedisBroadcast
    redis: Redis | None
    prefix: str

    @property
    def shared(self) -> bool:
        """True when several replicas may serve the same sessions, tasks and apps."""
        return self.redis is not None

    @classmethod
    def alone(cls, instance_id: str | None = None) -> Cluster:
        return cls(instance_id or secrets.token_hex(8), LocalBroadcast(), None, "appdeck")

    @classmethod
    async def connect(
        cls,
        url: str,
        prefix: str,
        instance_id: str | None = None,
        *,
        client: type[Redis] | None = None,
    ) -> Cluster:
        """Connect to Redis (checked with a PING) and start the broadcast reader. ``client``:
        the Redis class to use (redis-py's by default; the composition root gives one that times
        its commands)."""
        if client is None:
            from redis.asyncio import Redis

            client = Redis
        redis: Redis = bounded(
            url, REDIS_CONNECTIONS, REDIS_TIMEOUT, cls=client, health_check_interval=15
        )
        try:
            await redis.ping()
            broadcast = RedisBroadcast(redis, prefix)
            await broadcast.start()
        except BaseException:
            await redis.aclose()
            raise
        return cls(instance_id or secrets.token_hex(8), broadcast, redis, prefix)

    async def close(self) -> None:
        if isinstance(self.broadcast, RedisBroadcast):
            await self.broadcast.close()
        if self.redis is not None:
            await self.redis.aclose()
