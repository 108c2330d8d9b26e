"""The engine factory: drivers, SQLite pragmas, the default database file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from appdeck.storage import create_engine, default_sqlite_url


async def test_every_sqlite_connection_gets_wal_normal_sync_a_busy_timeout_and_foreign_keys(
    tmp_path: Path,
) -> None:
    engine = create_engine(default_sqlite_url(tmp_path))
    try:
        async with engine.connect() as conn:
            pragmas = {
                name: (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar_one()
                for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
            }
    finally:
        await engine.dispose()
    assert pragmas == {
        "journal_mode": "wal",
        "synchronous": 1,
        "busy_timeout": 5000,
        "foreign_keys": 1,
    }


def test_the_default_sqlite_url_is_appdeck_db_in_the_data_dir_which_it_creates(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "nested" / "data dir"
    url = make_url(default_sqlite_url(data_dir))
    assert url.drivername == "sqlite+aiosqlite"
    assert url.database == str((data_dir / "appdeck.db").resolve())
    assert data_dir.is_dir()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///appdeck.db",
        "postgresql+psycopg2://postgres@127.0.0.1/test",
        "mysql+aiomysql://root@127.0.0.1/test",
    ],
)
def test_urls_without_a_supported_async_driver_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"async driver|unsupported database"):
        create_engine(url)


async def test_an_engine_connects_to_each_supported_database_with_a_sized_pool(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    try:
        if engine.dialect.name == "postgresql":
            assert engine.pool.size() == 10
        async with engine.connect() as conn:
            assert (await conn.exec_driver_sql("SELECT 1")).scalar_one() == 1
    finally:
        await engine.dispose()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_postgresql_session_stalled_inside_a_transaction_loses_its_locks_to_the_others(
    database_url: str,
) -> None:
    """A replica paused between a statement and its COMMIT must not hold the rows it locked
    (an app's lease) for as long as it is away: the server ends its session."""
    stalled = create_engine(database_url, idle_in_transaction_ms=300)
    other = create_engine(database_url)
    try:
        async with other.connect() as conn:
            shown = await conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout")
            assert shown.scalar_one() == "30s"  # the platform's default
        async with stalled.connect() as paused:
            await paused.begin()
            await paused.exec_driver_sql("SELECT pg_advisory_xact_lock(424242)")
            await asyncio.sleep(1.5)  # "paused": no statement, no COMMIT
            async with asyncio.timeout(60), other.begin() as conn:
                got = await conn.exec_driver_sql("SELECT pg_try_advisory_xact_lock(424242)")
                assert got.scalar_one() is True  # the stalled session's lock is gone
            with pytest.raises(DBAPIError):
                await paused.exec_driver_sql("SELECT 1")  # and so is the session itself
    finally:
        await stalled.dispose()
        await other.dispose()


async def test_none_is_bound_as_null_by_the_registered_adapter_in_sqlite3_and_through_the_engine(
    tmp_path: Path,
) -> None:
    assert (type(None), sqlite3.PrepareProtocol) in sqlite3.adapters
    raw = sqlite3.connect(tmp_path / "raw.db")
    try:
        raw.execute("CREATE TABLE t (a, b)")
        raw.execute("INSERT INTO t VALUES (?, ?)", (None, 7))
        assert raw.execute("SELECT typeof(a), a IS NULL, typeof(b) FROM t").fetchall() == [
            ("null", 1, "integer")
        ]
    finally:
        raw.close()
    engine = create_engine(default_sqlite_url(tmp_path))
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql("CREATE TABLE t (a, b)")
            await conn.exec_driver_sql("INSERT INTO t VALUES (?, ?)", (None, "x"))
            rows = (await conn.exec_driver_sql("SELECT typeof(a), typeof(b) FROM t")).all()
    finally:
        await engine.dispose()
    assert [tuple(row) for row in rows] == [("null", "text")]
