"""OutboundShares on its own: a tenant's share full never blocks another tenant, a call over
its share waits for one of its own then goes (or is refused naming the share), the pool's cap
holds for all tenants together, and a finished tenant leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from appdeck.common.errors import Unavailable
from appdeck.platform.apis.shares import OutboundLimits, OutboundShares

FAR = 3600.0


async def _hold(
    shares: OutboundShares, tenant: str, held: asyncio.Event, go: asyncio.Event
) -> None:
    async with shares.slot(tenant, deadline=asyncio.get_running_loop().time() + FAR):
        held.set()
        await go.wait()


async def _holding(
    shares: OutboundShares, tenant: str, n: int
) -> tuple[list[asyncio.Task[None]], asyncio.Event]:
    go = asyncio.Event()
    helds = [asyncio.Event() for _ in range(n)]
    tasks = [asyncio.create_task(_hold(shares, tenant, h, go)) for h in helds]
    async with asyncio.timeout(10):
        for held in helds:
            await held.wait()
    return tasks, go


async def test_a_tenant_over_its_share_waits_for_its_own_and_never_blocks_another() -> None:
    shares = OutboundShares(OutboundLimits(total=4, per_tenant=2, wait_s=FAR))
    loop = asyncio.get_running_loop()
    tasks, go = await _holding(shares, "t2", 2)
    queued = asyncio.create_task(_hold(shares, "t2", third := asyncio.Event(), asyncio.Event()))
    await asyncio.sleep(0)
    async with (  # t2's share is full, one of its calls queued: t1 still gets two
        shares.slot("t1", deadline=loop.time() + FAR),
        shares.slot("t1", deadline=loop.time() + FAR),
    ):
        assert not third.is_set()
    go.set()  # t2's first calls end: its queued one takes a slot
    async with asyncio.timeout(10):
        await asyncio.gather(*tasks)
        await third.wait()
    queued.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await queued
    assert shares._shares == {}  # nothing kept for tenants without calls


async def test_a_call_refused_after_the_wait_says_it_is_the_tenants_share() -> None:
    shares = OutboundShares(OutboundLimits(total=4, per_tenant=1, wait_s=0.05))
    tasks, go = await _holding(shares, "t2", 1)
    with pytest.raises(Unavailable, match="its share of the outbound pool") as refused:
        async with shares.slot("t2", deadline=asyncio.get_running_loop().time() + FAR):
            pass
    assert refused.value.hint is not None
    go.set()
    await asyncio.gather(*tasks)


async def test_the_pools_cap_holds_for_all_tenants_together() -> None:
    shares = OutboundShares(OutboundLimits(total=2, per_tenant=2, wait_s=0.05))
    first, go1 = await _holding(shares, "a", 1)
    second, go2 = await _holding(shares, "b", 1)
    with pytest.raises(Unavailable, match="outbound pool is busy"):
        async with shares.slot("c", deadline=asyncio.get_running_loop().time() + FAR):
            pass
    go1.set()
    go2.set()
    await asyncio.gather(*first, *second)
    async with shares.slot("c", deadline=asyncio.get_running_loop().time() + FAR):
        pass
