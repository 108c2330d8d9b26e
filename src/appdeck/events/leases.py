"""Stream leases: who serves a session's GET stream (or a resumed request stream).

The spec allows one standalone GET stream per session, and one connection per resumed
stream; across replicas that is a lease. :class:`LocalLeases` (one process) answers from
memory, as before: a second claim is refused at once. :class:`RedisLeases` is ``SET key token
NX PX ttl``: the holder renews it (compare-and-expire) every ``ttl / 3`` while its connection
is open and releases it with compare-and-delete, so it never removes a lease someone else took
after its own expired. A holder that dies (kill -9, a lost host) stops renewing: its lease
expires within ``ttl`` and the next claim succeeds. A client that *resumes* (``Last-Event-ID``)
takes the lease at once (:meth:`RedisLeases.take`): its old connection is gone as far as it
knows, and a client such as the official Python SDK retries only twice, a second apart, so
waiting out a dead replica's lease would lose its stream. The old holder, if it lives, sees
its lease gone at its next renewal (or from the ``Taken`` doorbell) and closes.
"""

from __future__ import annotations

import math
import secrets
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # loaded by replica mode only (appdeck.common.outages)
    from redis.asyncio import Redis

from appdeck.events.ports import Lease, StreamLeases

MAX_LOCAL: Final = 100_000
"""Leases one process holds at most (each is an open connection; bounded all the same)."""

_RENEW: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class LocalLeases(StreamLeases):
    """One process: a set of held keys; nothing expires (a dead process holds nothing)."""

    renew_every = math.inf

    def __init__(self) -> None:
        self._held: dict[str, str] = {}

    async def acquire(self, key: str) -> Lease | None:
        if key in self._held or len(self._held) >= MAX_LOCAL:
            return None
        lease = Lease(key, secrets.token_hex(8))
        self._held[key] = lease.token
        return lease

    async def take(self, key: str) -> Lease | None:
        """As :meth:`acquire`: a holder here releases as soon as its connection ends, so a held
        lease is a live connection (today's 409)."""
        return await self.acquire(key)

    async def renew(self, lease: Lease) -> bool:
        return self._held.get(lease.key) == lease.token

    async def release(self, lease: Lease) -> None:
        if self._held.get(lease.key) == lease.token:
            del self._held[lease.key]


class RedisLeases(StreamLeases):
    """Leases in Redis under ``<prefix>:lease:<key>`` (see the module docstring)."""

    def __init__(self, redis: Redis, prefix: str, *, ttl_seconds: float = 10.0) -> None:
        self._redis = redis
        self._prefix = f"{prefix}:lease:"
        self._ttl_ms = max(100, int(ttl_seconds * 1000))
        self.renew_every = self._ttl_ms / 3000
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)

    async def acquire(self, key: str) -> Lease | None:
        lease = Lease(key, secrets.token_hex(16))
        taken = await self._redis.set(self._prefix + key, lease.token, nx=True, px=self._ttl_ms)
        return lease if taken else None

    async def take(self, key: str) -> Lease | None:
        lease = Lease(key, secrets.token_hex(16))
        await self._redis.set(self._prefix + key, lease.token, px=self._ttl_ms)
        return lease

    async def renew(self, lease: Lease) -> bool:
        return bool(await self._renew([self._prefix + lease.key], [lease.token, self._ttl_ms]))

    async def release(self, lease: Lease) -> None:
        await self._release([self._prefix + lease.key], [lease.token])
