"""AppDatabases: one database per app, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from appdeck.common.errors import InvalidArgument, Unavailable
from appdeck.platform.tables.appdb_postgres import CONNECTION_LIMIT
from appdeck.platform.tables.databases import AppDatabases, QueryTimeout
from tests.conftest import _dsn

SLOW = {
    "sqlite": (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    ),
    "postgresql": "SELECT pg_sleep(30)",
}


async def _rows(databases: AppDatabases, app_id: int) -> list[str]:
    async with databases.transaction(app_id, readonly=True) as conn:
        result = await conn.exec_driver_sql("SELECT name FROM notes ORDER BY id")
        return [row[0] for row in result]


async def _make_notes(databases: AppDatabases, app_id: int, *names: str) -> None:
    async with databases.transaction(app_id) as conn:
        await conn.exec_driver_sql(
            "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, name TEXT)"
        )
        for index, name in enumerate(names, start=1):
            await conn.exec_driver_sql(f"INSERT INTO notes (id, name) VALUES ({index}, '{name}')")


async def test_a_transaction_commits_on_normal_exit(app_databases: AppDatabases) -> None:
    await _make_notes(app_databases, 1, "a", "b")
    assert await _rows(app_databases, 1) == ["a", "b"]


async def test_a_transaction_rolls_back_on_an_exception(app_databases: AppDatabases) -> None:
    await _make_notes(app_databases, 1, "a")

    async def insert_then_fail() -> None:
        async with app_databases.transaction(1) as conn:
            await conn.exec_driver_sql("INSERT INTO notes (id, name) VALUES (9, 'lost')")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await insert_then_fail()
    assert await _rows(app_databases, 1) == ["a"]


async def test_each_app_has_a_database_of_its_own(app_databases: AppDatabases) -> None:
    await _make_notes(app_databases, 1, "one")
    await _make_notes(app_databases, 2, "two")
    assert await _rows(app_databases, 1) == ["one"]
    assert await _rows(app_databases, 2) == ["two"]


async def test_a_statement_past_the_time_limit_raises_query_timeout(
    app_databases: AppDatabases,
) -> None:
    with pytest.raises(QueryTimeout) as caught:
        async with app_databases.transaction(1, timeout_s=0.2) as conn:
            await conn.exec_driver_sql(SLOW[app_databases.dialect])
    assert caught.value.code == "quota_exceeded"
    await _make_notes(app_databases, 1, "after")  # the connection is usable again
    assert await _rows(app_databases, 1) == ["after"]


async def test_a_readonly_transaction_refuses_writes(app_databases: AppDatabases) -> None:
    await _make_notes(app_databases, 1, "a")
    with pytest.raises(DBAPIError):
        async with app_databases.transaction(1, readonly=True) as conn:
            await conn.exec_driver_sql("INSERT INTO notes (id, name) VALUES (2, 'b')")
    await _make_notes(app_databases, 1)  # and the next transaction may write again
    async with app_databases.transaction(1) as conn:
        await conn.exec_driver_sql("INSERT INTO notes (id, name) VALUES (2, 'b')")
    assert await _rows(app_databases, 1) == ["a", "b"]


async def test_drop_deletes_the_apps_data_and_a_later_use_starts_empty(
    app_databases: AppDatabases,
) -> None:
    await _make_notes(app_databases, 1, "a")
    await _make_notes(app_databases, 2, "kept")
    await app_databases.drop(1)
    async with app_databases.transaction(1) as conn:
        found = await conn.exec_driver_sql(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'notes'"
            if app_databases.dialect == "postgresql"
            else "SELECT count(*) FROM sqlite_master WHERE name = 'notes'"
        )
        assert found.scalar() == 0
    assert await _rows(app_databases, 2) == ["kept"]


async def test_bad_app_ids_and_timeouts_are_refused(app_databases: AppDatabases) -> None:
    for app_id in (-1, 2**31, True):
        with pytest.raises(InvalidArgument):
            async with app_databases.transaction(app_id):
                pass
    for timeout in (0.0, -1.0, 10_000.0):
        with pytest.raises(InvalidArgument):
            async with app_databases.transaction(1, timeout_s=timeout):
                pass


async def test_code_the_app_defined_cannot_leave_its_role_inside_the_platforms_transaction(
    pg_app_databases: AppDatabases,
) -> None:
    """An app's trigger, default or check runs inside the platform's transaction: it must not
    be able to become anyone else (SET ROLE is checked against the session's user)."""
    await _make_notes(pg_app_databases, 2, "app two only")
    async with pg_app_databases.transaction(1) as conn:
        role = (await conn.exec_driver_sql("SELECT current_user")).scalar()
        await conn.exec_driver_sql(
            "CREATE FUNCTION escape() RETURNS text LANGUAGE sql AS "
            "$$ SELECT set_config('role', 'none', true) $$"
        )
    attempts = [
        "SELECT set_config('role', 'postgres', true)",
        "SET ROLE postgres",
        "SET SESSION AUTHORIZATION postgres",
        "SELECT name FROM app_2.notes",
    ]

    async def after_reset(sql: str) -> None:
        async with pg_app_databases.transaction(1) as conn:
            await conn.exec_driver_sql("RESET ROLE")
            await conn.exec_driver_sql(sql)

    for sql in attempts:
        with pytest.raises(DBAPIError):
            await after_reset(sql)
    async with pg_app_databases.transaction(1) as conn:
        await conn.exec_driver_sql("RESET ROLE")
        assert (await conn.exec_driver_sql("SELECT current_user")).scalar() == role
        assert (await conn.exec_driver_sql("SELECT session_user")).scalar() == role


async def test_an_app_holding_all_its_connections_gets_unavailable_not_a_crash(
    pg_app_databases: AppDatabases,
) -> None:
    grant = await pg_app_databases.grant(1, sandboxed=False)
    url = grant.env["DATABASE_URL"]
    held = [await asyncpg.connect(url, timeout=5) for _ in range(CONNECTION_LIMIT)]
    try:
        with pytest.raises(Unavailable):
            async with pg_app_databases.transaction(1):
                pass
    finally:
        for conn in held:
            await conn.close()
    async with pg_app_databases.transaction(1) as conn:  # and it recovers
        assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1


async def test_the_platforms_tables_are_in_another_database_the_app_cannot_name(
    pg_app_databases: AppDatabases, postgres_apps_cluster: tuple[str, str]
) -> None:
    platform_url, _ = postgres_apps_cluster
    platform = await asyncpg.connect(_dsn(platform_url), timeout=5)
    try:
        await platform.execute("CREATE TABLE IF NOT EXISTS platform_secrets (token text)")
        await platform.execute("INSERT INTO platform_secrets VALUES ('never an app''s')")
    finally:
        await platform.close()
    async with pg_app_databases.transaction(1) as conn:
        database = (await conn.exec_driver_sql("SELECT current_database()")).scalar()
        assert database == f"{make_url(platform_url).database}_apps"
    platform_db = make_url(platform_url).database
    for sql in (
        "SELECT token FROM platform_secrets",
        "SELECT token FROM public.platform_secrets",
        f'SELECT token FROM "{platform_db}".public.platform_secrets',  # no cross-database names
        "CREATE EXTENSION dblink",
    ):
        with pytest.raises(DBAPIError):
            await _run(pg_app_databases, 1, sql)


async def _run(databases: AppDatabases, app_id: int, sql: str) -> None:
    async with databases.transaction(app_id) as conn:
        await conn.exec_driver_sql(sql)
