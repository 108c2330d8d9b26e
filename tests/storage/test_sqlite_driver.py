"""The platform's SQLite driver: one trip to SQLite's thread per statement, with the same
rows, counts, errors and transactions as SQLAlchemy's own aiosqlite adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage import create_engine, default_sqlite_url


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(default_sqlite_url(tmp_path))
    async with engine.begin() as conn:
        await conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)")
    yield engine
    await engine.dispose()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions run on SQLite's threads, in turn."""
    ran: list[str] = []
    real = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(getattr(fn, "__name__", repr(fn)))
        return await real(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    return ran


async def test_a_statement_is_one_trip_to_sqlites_thread(
    engine: AsyncEngine, trips: list[str]
) -> None:
    async with engine.connect() as conn:
        await conn.exec_driver_sql("SELECT 1")  # the pool's connection is open
        trips.clear()
        rows = (await conn.execute(sa.text("SELECT 1 AS a, 'x' AS b"))).all()
        assert trips == ["_run"]
    assert [tuple(r) for r in rows] == [(1, "x")]


async def test_rows_counts_and_ids_come_back_as_before(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        done = await conn.execute(sa.text("INSERT INTO t (name) VALUES ('a')"))
        assert (done.rowcount, done.lastrowid) == (1, 1)
        await conn.execute(sa.text("INSERT INTO t (name) VALUES (:n)"), [{"n": "b"}, {"n": "c"}])
        changed = await conn.execute(sa.text("UPDATE t SET name = name || '!' WHERE id > 1"))
        assert changed.rowcount == 2
        returned = await conn.execute(sa.text("DELETE FROM t WHERE id = 3 RETURNING name"))
        assert returned.scalar_one() == "c!"
        none = await conn.execute(sa.text("SELECT name FROM t WHERE id = 99"))
        assert none.first() is None
    async with engine.connect() as conn:
        names = (await conn.execute(sa.text("SELECT name FROM t ORDER BY id"))).scalars().all()
        streamed = [r.name async for r in await conn.stream(sa.text("SELECT name FROM t"))]
    assert names == ["a", "b!"]
    assert sorted(streamed) == ["a", "b!"]  # a server-side cursor is SQLAlchemy's own


async def test_errors_are_sqlalchemys_and_roll_the_transaction_back(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(sa.text("INSERT INTO t (name) VALUES ('a')"))
        with pytest.raises(IntegrityError):
            await conn.execute(sa.text("INSERT INTO t (name) VALUES ('a')"))
        await conn.rollback()
    async with engine.connect() as conn:
        with pytest.raises(OperationalError, match="no such table"):
            await conn.execute(sa.text("SELECT * FROM nowhere"))
        await conn.rollback()
        assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one() == 0


async def test_a_connection_without_a_transaction_goes_back_to_the_pool_without_a_trip(
    engine: AsyncEngine, trips: list[str]
) -> None:
    async with engine.connect() as conn:
        await conn.execute(sa.text("SELECT count(*) FROM t"))  # a read opens none
    assert trips == ["_run"]
    trips.clear()
    async with engine.begin() as conn:  # committed: nothing left to roll back
        await conn.execute(sa.text("INSERT INTO t (name) VALUES ('a')"))
    assert trips == ["_run", "commit"]


async def test_a_transaction_left_open_is_still_rolled_back(
    engine: AsyncEngine, trips: list[str]
) -> None:
    async with engine.connect() as conn:
        await conn.execute(sa.text("INSERT INTO t (name) VALUES ('a')"))
    assert trips == ["_run", "rollback"]  # given back with its write undone
    async with engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one() == 0
        await conn.exec_driver_sql("BEGIN IMMEDIATE")
        await conn.execute(sa.text("INSERT INTO t (name) VALUES ('b')"))
        await conn.rollback()
        assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one() == 0
