"""The app lock as operations hold it: renewed while they run, lost (and writes stopped) when
another replica takes the app over, waited for by a rollback or restart (bounded)."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from appdeck.common.errors import Conflict
from appdeck.platform.deploy.locks import AppLocks
from appdeck.storage import Storage
from appdeck.storage.app_locks import AppLockStore, Fenced
from appdeck.storage.schema import app_locks


def _locks(storage: Storage, instance: str, ttl: float = 15.0) -> AppLocks:
    return AppLocks(AppLockStore(storage.engine), instance, ttl=ttl)


async def test_a_hold_keeps_its_lease_past_the_ttl_by_renewing_it(storage: Storage) -> None:
    # a 3 s lease renewed every 1 s: a renewal may be 2 s late (a loaded machine) before the
    # lease runs out; with 1.2 s, 0.8 s late lost it
    a, b = _locks(storage, "a", ttl=3.0), _locks(storage, "b", ttl=3.0)
    async with a.hold(7) as held:
        await asyncio.sleep(7.5)  # 2.5 lease lengths
        assert not held.lost
        assert await b.try_take(7) is None
        held.check()
    assert await b.try_take(7) is not None  # released at the end


async def test_two_operations_of_one_replica_are_two_holders(storage: Storage) -> None:
    a = _locks(storage, "a")
    first = await a.try_take(7)
    assert first is not None
    assert await a.try_take(7) is None
    await first.release()
    assert await a.try_take(7) is not None


async def test_a_hold_taken_over_knows_it_lost_the_app_and_stops_writing(
    storage: Storage,
) -> None:
    # b's lease is a minute: it is never renewed here (not started), and must outlive a
    # loaded machine's pauses until it is checked at the end
    a, b = _locks(storage, "a", ttl=0.6), _locks(storage, "b", ttl=60)
    held = await a.try_take(7)
    assert held is not None
    held.start()
    async with storage.engine.begin() as conn:  # a paused past its lease ...
        await conn.execute(sa.update(app_locks).values(expires_at=1.0))
    theirs = await b.try_take(7)  # ... and b took the app
    assert theirs is not None
    assert theirs.lease.fence == held.lease.fence + 1
    async with asyncio.timeout(60):
        for _ in range(1000):  # the next renewal (every ttl / 3) finds it lost
            if held.lost:
                break
            await asyncio.sleep(0.05)
    with pytest.raises(Fenced):
        held.check()
    assert not await held.confirm()
    await held.release()  # leaves b's lease alone
    assert await b.store.held(theirs.lease)
    await theirs.release()


async def test_a_hold_let_go_with_its_last_write_neither_renews_nor_writes_again(
    storage: Storage,
) -> None:
    a, b = _locks(storage, "a", ttl=0.6), _locks(storage, "b", ttl=60)
    held = await a.try_take(7)
    assert held is not None
    held.start()
    await held.quiet()  # before the last write: no renewal races it
    async with storage.engine.begin() as conn:  # the last write's transaction let it go
        await conn.execute(sa.update(app_locks).values(expires_at=0.0))
    held.let_go()
    await asyncio.sleep(0.5)  # past a renewal's time (ttl / 3): none ran, none found it lost
    assert not held.lost
    theirs = await b.try_take(7)
    assert theirs is not None
    await held.release()  # writes nothing: b's lease stands
    assert await b.store.held(theirs.lease)
    assert a.held() == 0
    await theirs.release()


async def test_a_rollback_or_restart_waits_for_the_app_then_gives_up(storage: Storage) -> None:
    a, b = _locks(storage, "a"), _locks(storage, "b")
    held = await a.try_take(7)
    assert held is not None
    with pytest.raises(Conflict, match="under way"):
        await b.take(7, wait_s=0.3)
    waiting = asyncio.ensure_future(b.take(7, wait_s=10))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await held.release()
    async with asyncio.timeout(20):
        theirs = await waiting
    assert theirs.lease.fence == held.lease.fence + 1
    await theirs.release()
