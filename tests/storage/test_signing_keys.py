"""The signing keys' table: one first key whatever replicas race, the newest kept."""

from __future__ import annotations

import asyncio

from appdeck.storage import Storage, create_engine
from appdeck.storage.signing_keys import SealedKey, SigningKeyStore


async def test_only_the_first_of_racing_replicas_creates_the_first_keys(
    storage: Storage, database_url: str
) -> None:
    engines = [create_engine(database_url) for _ in range(5)]
    try:
        stores = [SigningKeyStore(engine) for engine in engines]
        async with asyncio.timeout(30):
            created = await asyncio.gather(
                *(
                    store.create_first([SealedKey(f"k{i}", f"sealed{i}", 100.0)])
                    for i, store in enumerate(stores)
                )
            )
    finally:
        for engine in engines:
            await engine.dispose()
    assert created.count(True) == 1
    winner = created.index(True)
    assert [k.kid for k in await SigningKeyStore(storage.engine).newest()] == [f"k{winner}"]


async def test_keys_read_newest_first_and_a_rotation_keeps_the_newest(storage: Storage) -> None:
    store = SigningKeyStore(storage.engine)
    assert await store.newest() == []
    assert await store.create_first([SealedKey("b", "s", 10.0), SealedKey("a", "s", 10.0)])
    for i in range(4):
        await store.add(SealedKey(f"r{i}", "s", 20.0 + i), keep=3)
    assert [k.kid for k in await store.newest()] == ["r3", "r2", "r1"]
    assert [k.kid for k in await store.newest(2)] == ["r3", "r2"]
