"""Consent requests in the database: used once whatever races, attempts bounded, table bounded."""

from __future__ import annotations

import asyncio

from appdeck.storage import Storage, create_engine
from appdeck.storage.consents import ConsentStore

NOW = 1_000_000.0
BODY = {"v": 1, "csrf": "c", "scopes": ["apps:read"]}


async def test_a_request_reads_back_until_it_is_taken_once(storage: Storage) -> None:
    store = ConsentStore(storage.engine)
    await store.insert("p1", BODY, NOW + 600, cap=100)
    row = await store.get("p1", NOW)
    assert row is not None
    assert row.body == BODY
    assert row.attempts == 0
    taken = await store.take("p1", NOW)
    assert taken is not None
    assert taken.body == BODY
    assert await store.take("p1", NOW) is None
    assert await store.get("p1", NOW) is None


async def test_of_twenty_replicas_taking_one_request_exactly_one_gets_it(
    storage: Storage, database_url: str
) -> None:
    engines = [create_engine(database_url) for _ in range(4)]  # four pools: four processes
    try:
        stores = [ConsentStore(engine) for engine in engines]
        await stores[0].insert("race", BODY, NOW + 600, cap=100)
        async with asyncio.timeout(30):
            taken = await asyncio.gather(*(stores[i % 4].take("race", NOW) for i in range(20)))
    finally:
        for engine in engines:
            await engine.dispose()
    assert sum(row is not None for row in taken) == 1


async def test_wrong_passwords_are_counted_up_to_the_limit_and_never_past_it(
    storage: Storage, database_url: str
) -> None:
    engines = [create_engine(database_url) for _ in range(3)]
    try:
        stores = [ConsentStore(engine) for engine in engines]
        await stores[0].insert("p", BODY, NOW + 600, cap=100)
        async with asyncio.timeout(30):
            counts = await asyncio.gather(
                *(stores[i % 3].failed_attempt("p", NOW, 5) for i in range(12))
            )
    finally:
        for engine in engines:
            await engine.dispose()
    assert sorted(c for c in counts if c is not None) == [1, 2, 3, 4, 5]
    assert counts.count(None) == 7
    row = await ConsentStore(storage.engine).get("p", NOW)
    assert row is not None
    assert row.attempts == 5


async def test_an_expired_request_is_neither_read_nor_taken_nor_counted(storage: Storage) -> None:
    store = ConsentStore(storage.engine)
    await store.insert("old", BODY, NOW, cap=100)
    assert await store.get("old", NOW) is None
    assert await store.failed_attempt("old", NOW, 5) is None
    assert await store.take("old", NOW) is None
    assert await store.count() == 0  # taking an expired one deletes it all the same


async def test_expired_requests_are_purged(storage: Storage) -> None:
    store = ConsentStore(storage.engine)
    for i in range(5):
        await store.insert(f"p{i}", BODY, NOW + i, cap=100)
    assert await store.purge(NOW + 2) == 3
    assert await store.count() == 2
    assert await store.get("p4", NOW + 2) is not None


async def test_the_table_is_bounded_and_the_oldest_requests_go_first(storage: Storage) -> None:
    store = ConsentStore(storage.engine)
    for i in range(12):
        await store.insert(f"p{i:02}", BODY, NOW + 600 + i, cap=10)
    assert await store.count() == 10
    assert await store.get("p00", NOW) is None
    assert await store.get("p01", NOW) is None
    assert await store.get("p11", NOW) is not None


async def test_a_discarded_request_is_gone(storage: Storage) -> None:
    store = ConsentStore(storage.engine)
    await store.insert("p", BODY, NOW + 600, cap=10)
    await store.discard("p")
    await store.discard("p")  # twice: nothing to do
    assert await store.get("p", NOW) is None


async def test_a_store_that_trims_every_few_inserts_stays_within_cap_plus_that(
    storage: Storage,
) -> None:
    store = ConsentStore(storage.engine, trim_every=4)
    counts = []
    for i in range(30):
        await store.insert(f"p{i:02}", BODY, NOW + 600 + i, cap=10)
        counts.append(await store.count())
    assert max(counts) <= 10 + 4
    assert counts[-1] == 12  # trimmed to 10 at the 28th insert, then two more
    assert await store.get("p29", NOW) is not None
