"""OutboundShares: each tenant's share of the outbound pool (test_api and discover_apis).

Every request :class:`~appdeck.platform.apis.client.AppHttp` sends holds one slot of its
tenant's share (``per_tenant``) and one of the whole pool's (``total``, the connection pool's
size) from before it connects until its body is read or dropped. A tenant whose share is
taken waits for one of its own calls to end, at most ``wait_s`` and never past the call's own
deadline, then gets :class:`~appdeck.common.errors.Unavailable` saying so: its calls queue
behind each other, never in front of another tenant's. The share is taken before the pool's,
so a tenant waiting for its share holds no pool slot meanwhile.

Why this is enough: with ``per_tenant`` at a fifth of ``total`` (the defaults: 10 of 50), one
tenant can hold at most a fifth of the pool, and every call ends by its deadline (at most
30 s), so the pool is only ever full when five tenants are busy at once, and then a call waits
at most ``wait_s`` for a slot. Per server process: replicas each have their own pool.

    shares = OutboundShares(OutboundLimits(total=50, per_tenant=10, wait_s=5))
    async with shares.slot("acme", deadline=loop.time() + 10):
        ...  # connect, send, read
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

from appdeck.common.errors import Unavailable

__all__ = ["OutboundLimits", "OutboundShares"]

DEFAULT_TOTAL: Final = 50
DEFAULT_PER_TENANT: Final = 10
DEFAULT_WAIT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class OutboundLimits:
    """``APPDECK_OUTBOUND_CONNECTIONS``, ``..._PER_TENANT`` and ``..._WAIT_S``."""

    total: int = DEFAULT_TOTAL
    """The pool's connections: calls in flight at once, all tenants together."""
    per_tenant: int = DEFAULT_PER_TENANT
    """Calls in flight at once for one tenant (at most ``total``)."""
    wait_s: float = DEFAULT_WAIT_S
    """How long a call waits for a free slot before it is refused."""


class _Share:
    __slots__ = ("slots", "users")

    def __init__(self, size: int) -> None:
        self.slots = asyncio.Semaphore(size)
        self.users = 0
        """Calls holding or waiting for a slot (the share is dropped when none)."""


class OutboundShares:
    def __init__(self, limits: OutboundLimits) -> None:
        self.limits = limits
        self._per_tenant = max(1, min(limits.per_tenant, limits.total))
        self._pool = asyncio.Semaphore(max(1, limits.total))
        self._shares: dict[str, _Share] = {}

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str, *, deadline: float) -> AsyncIterator[None]:
        """Hold one of ``tenant``'s slots and one of the pool's; :class:`Unavailable` when
        none is free by ``deadline`` (loop time) or within ``wait_s``."""
        loop = asyncio.get_running_loop()
        until = min(deadline, loop.time() + self.limits.wait_s)
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = _Share(self._per_tenant)
        share.users += 1
        try:
            if not await _acquired(share.slots, until):
                raise Unavailable(
                    f"this tenant already has {self._per_tenant} calls to its apps in flight "
                    "(its share of the outbound pool); none ended in time",
                    hint="wait for those calls to end, or give them a lower timeout_s",
                )
            try:
                if not await _acquired(self._pool, until):
                    raise Unavailable(
                        "the server's outbound pool is busy with other calls",
                        hint="retry in a few seconds",
                    )
                try:
                    yield
                finally:
                    self._pool.release()
            finally:
                share.slots.release()
        finally:
            share.users -= 1
            if share.users == 0 and self._shares.get(tenant) is share:
                del self._shares[tenant]


async def _acquired(slots: asyncio.Semaphore, until: float) -> bool:
    """Whether a slot was taken before ``until`` (loop time)."""
    if not slots.locked():  # free and nobody queued: taken at once, no timer to arm
        await slots.acquire()
        return True
    try:
        async with asyncio.timeout_at(until):
            await slots.acquire()
    except TimeoutError:
        return False
    return True
