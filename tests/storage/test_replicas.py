"""ReplicaStore: a heartbeat per server process on the database's clock; dead when stale."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from appdeck.storage import Storage
from appdeck.storage.replicas import ReplicaStore, database_now
from appdeck.storage.schema import replicas


async def _age(storage: Storage, instance_id: str, seconds: float) -> None:
    """Make a replica's last heartbeat ``seconds`` older (as if it had been silent)."""
    async with storage.engine.begin() as conn:
        await conn.execute(
            sa.update(replicas)
            .where(replicas.c.instance_id == instance_id)
            .values(heartbeat_at=replicas.c.heartbeat_at - seconds)
        )


async def _row(storage: Storage, instance_id: str) -> sa.Row[tuple[float, float]] | None:
    async with storage.engine.connect() as conn:
        result = await conn.execute(
            sa.select(replicas.c.started_at, replicas.c.heartbeat_at).where(
                replicas.c.instance_id == instance_id
            )
        )
        return result.first()


async def test_a_replica_that_beats_is_live_and_one_that_never_did_is_not(
    storage: Storage,
) -> None:
    a, b = ReplicaStore(storage.engine, "a"), ReplicaStore(storage.engine, "b")
    assert await a.live() == set()
    await a.heartbeat()
    await b.heartbeat()
    assert await a.live() == {"a", "b"}
    assert await ReplicaStore(storage.engine, "c").live() == {"a", "b"}


async def test_the_heartbeat_is_the_databases_time(storage: Storage) -> None:
    await ReplicaStore(storage.engine, "a").heartbeat()
    async with storage.engine.connect() as conn:
        db_now = await conn.scalar(sa.select(database_now(storage.engine)))
    row = await _row(storage, "a")
    assert row is not None
    assert db_now is not None
    started_at, heartbeat_at = row
    assert started_at == heartbeat_at
    assert 0 <= db_now - heartbeat_at < 5


async def test_a_second_beat_moves_the_heartbeat_and_keeps_the_start(storage: Storage) -> None:
    a = ReplicaStore(storage.engine, "a")
    await a.heartbeat()
    await _age(storage, "a", 30)
    before = await _row(storage, "a")
    await a.heartbeat()
    after = await _row(storage, "a")
    assert before is not None
    assert after is not None
    assert after.started_at == before.started_at
    assert after.heartbeat_at > before.heartbeat_at + 20


async def test_a_replica_silent_past_the_dead_delay_is_not_live(storage: Storage) -> None:
    a, b = ReplicaStore(storage.engine, "a"), ReplicaStore(storage.engine, "b")
    await a.heartbeat()
    await b.heartbeat()
    await _age(storage, "a", 9)
    assert await b.live() == {"a", "b"}
    await _age(storage, "a", 2)  # 11 s silent: dead at 10
    assert await b.live() == {"b"}
    await a.heartbeat()  # back (it was stalled, not dead): live again
    assert await b.live() == {"a", "b"}


async def test_a_clean_stop_removes_the_replica_at_once(storage: Storage) -> None:
    a, b = ReplicaStore(storage.engine, "a"), ReplicaStore(storage.engine, "b")
    await a.heartbeat()
    await b.heartbeat()
    await a.remove()
    assert await b.live() == {"b"}
    assert await _row(storage, "a") is None
    await a.remove()  # twice is harmless


async def test_rows_of_replicas_long_dead_are_forgotten(storage: Storage) -> None:
    a, b = ReplicaStore(storage.engine, "a"), ReplicaStore(storage.engine, "b")
    await a.heartbeat()
    await b.heartbeat()
    await _age(storage, "a", 7_200)
    assert await b.forget_dead() == 1
    assert await _row(storage, "a") is None
    assert await _row(storage, "b") is not None
    assert await b.forget_dead() == 0


async def test_the_heartbeat_loop_beats_until_told_to_stop(storage: Storage) -> None:
    a = ReplicaStore(storage.engine, "a", interval=0.05)
    stopping = asyncio.Event()
    loop = asyncio.create_task(a.beat_forever(stopping))
    try:
        async with asyncio.timeout(10):
            while await _row(storage, "a") is None:  # noqa: ASYNC110 - a bounded poll of the database
                await asyncio.sleep(0.01)
        await _age(storage, "a", 60)
        aged = await _row(storage, "a")
        assert aged is not None
        async with asyncio.timeout(10):  # a later beat brings it back to now
            while (row := await _row(storage, "a")) is None or row.heartbeat_at <= aged[1]:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        stopping.set()
        async with asyncio.timeout(10):
            await loop
    assert await a.live() == {"a"}
