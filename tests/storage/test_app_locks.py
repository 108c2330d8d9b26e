"""App leases in the database (SQLite and PostgreSQL): one holder at a time, a fence that
only grows, expiry on the database's clock, and writes refused to a holder that lost it."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from appdeck.storage import Storage
from appdeck.storage.app_locks import AppLockStore, Lease
from appdeck.storage.schema import app_locks


@pytest.fixture
def locks(storage: Storage) -> AppLockStore:
    return AppLockStore(storage.engine)


async def _expire(locks: AppLockStore, app_id: int) -> None:
    """As if the holder had been paused past its lease."""
    async with locks._engine.begin() as conn:
        await conn.execute(
            sa.update(app_locks).where(app_locks.c.app_id == app_id).values(expires_at=1.0)
        )


async def _guarded_write(locks: AppLockStore, lease: Lease) -> int:
    """A write carrying the lease's fence (as deployment writes do): rows written."""
    async with locks._engine.begin() as conn:
        done = await conn.execute(
            sa.update(app_locks)
            .where(app_locks.c.app_id == lease.app_id, locks.guard(lease))
            .values(holder=app_locks.c.holder)
        )
    return int(done.rowcount)


async def test_a_free_app_is_taken_and_another_holder_is_refused(locks: AppLockStore) -> None:
    first = await locks.acquire(7, "a:1", 30)
    assert first is not None
    assert (first.holder, first.fence) == ("a:1", 1)
    assert first.expires_at > await locks.now() + 25
    assert await locks.acquire(7, "b:1", 30) is None
    assert await locks.acquire(8, "b:1", 30) is not None  # another app is another lock


async def test_taking_it_again_as_its_holder_keeps_the_fence(locks: AppLockStore) -> None:
    first = await locks.acquire(7, "a:1", 30)
    again = await locks.acquire(7, "a:1", 60)
    assert first is not None
    assert again is not None
    assert again.fence == first.fence
    assert again.expires_at > first.expires_at


async def test_an_expired_lease_is_taken_over_with_the_next_fence_and_the_old_holder_is_refused(
    locks: AppLockStore,
) -> None:
    old = await locks.acquire(7, "a:1", 30)
    assert old is not None
    await _expire(locks, 7)
    assert await _guarded_write(locks, old) == 0  # expired: refused even before a takeover
    assert await locks.renew(old, 30) is None
    new = await locks.acquire(7, "b:1", 30)
    assert new is not None
    assert new.fence == old.fence + 1
    assert await _guarded_write(locks, new) == 1
    assert await _guarded_write(locks, old) == 0
    assert await locks.acquire(7, "a:1", 30) is None  # the old holder cannot come back
    assert not await locks.release(old)  # nor let go of what is no longer its
    assert await locks.held(new)


async def test_a_lease_expires_on_the_database_clock(locks: AppLockStore) -> None:
    lease = await locks.acquire(7, "a:1", 0.3)
    assert lease is not None
    assert await locks.acquire(7, "b:1", 30) is None
    async with asyncio.timeout(10):
        for _ in range(200):  # polling the database's clock: the expiry is there
            if not await locks.held(lease):
                break
            await asyncio.sleep(0.05)
    assert not await locks.held(lease)
    taken = await locks.acquire(7, "b:1", 30)
    assert taken is not None
    assert taken.fence == 2


async def test_renewing_extends_a_held_lease(locks: AppLockStore) -> None:
    lease = await locks.acquire(7, "a:1", 30)
    assert lease is not None
    renewed = await locks.renew(lease, 120)
    assert renewed is not None
    assert renewed.fence == lease.fence
    assert renewed.expires_at > lease.expires_at + 60


async def test_a_released_lease_is_free_and_the_fence_still_only_grows(
    locks: AppLockStore,
) -> None:
    fences = []
    for holder in ("a:1", "b:1", "a:2", "c:1"):
        lease = await locks.acquire(7, holder, 30)
        assert lease is not None
        fences.append(lease.fence)
        assert await locks.release(lease)
        assert not await locks.held(lease)
    assert fences == [1, 2, 3, 4]
    row = await locks.get(7)
    assert row is not None
    assert row.fence == 4


async def test_fifty_concurrent_takers_get_one_lease(locks: AppLockStore) -> None:
    async with asyncio.timeout(60):
        leases = await asyncio.gather(*(locks.acquire(7, f"r{i}:x", 30) for i in range(50)))
    assert len([lease for lease in leases if lease is not None]) == 1


async def test_a_holder_name_is_bounded(locks: AppLockStore) -> None:
    with pytest.raises(ValueError, match="holder"):
        await locks.acquire(7, "x" * 201, 30)
    with pytest.raises(ValueError, match="positive"):
        await locks.acquire(7, "a:1", 0)


async def test_a_sole_process_lets_go_of_the_leases_its_earlier_runs_left(
    locks: AppLockStore,
) -> None:
    old = await locks.acquire(7, "dead1:aa", 30)
    mine = await locks.acquire(8, "me:bb", 30)
    odd = await locks.acquire(9, "me%:cc", 30)  # no LIKE wildcard in a holder's name
    assert old is not None
    assert mine is not None
    assert odd is not None
    assert await locks.expire_others("me") == 2
    assert not await locks.held(old)
    assert not await locks.held(odd)
    assert await locks.held(mine)
