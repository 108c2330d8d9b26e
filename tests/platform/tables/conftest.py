"""``app_databases``: the apps' databases on SQLite (files in the test's tmp dir) and on
PostgreSQL (an apps database and a role prefix of this test module's own, dropped after it;
every app schema is dropped after each test)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from appdeck.platform.tables.databases import AppDatabases, apps_database_url, open_databases
from appdeck.storage import default_sqlite_url
from tests.conftest import POSTGRES_URL, _dsn, _on_private_loop


@pytest.fixture(scope="module")
def postgres_apps_cluster(postgres_module_database: str) -> Iterator[tuple[str, str]]:
    """(platform database URL, role prefix) of this module; its apps database and roles go
    when the module is done."""
    prefix = f"t{secrets.token_hex(4)}_app_"
    try:
        yield postgres_module_database, prefix
    finally:
        apps = make_url(apps_database_url(postgres_module_database)).database
        _on_private_loop(_drop_apps_cluster(str(apps), prefix))


@pytest.fixture(params=["sqlite", "postgresql"])
async def app_databases(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[AppDatabases]:
    """The apps' databases of a platform on SQLite or on PostgreSQL (see the module
    docstring); apps 1, 2, ... start empty in every test."""
    async with _databases(request, request.param, tmp_path / "data") as databases:
        yield databases


@pytest.fixture
async def pg_app_databases(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[AppDatabases]:
    """``app_databases`` on PostgreSQL only."""
    async with _databases(request, "postgresql", tmp_path / "data") as databases:
        yield databases


@contextlib.asynccontextmanager
async def _databases(
    request: pytest.FixtureRequest, kind: str, data_dir: Path
) -> AsyncIterator[AppDatabases]:
    if kind == "sqlite":
        databases = await open_databases(default_sqlite_url(data_dir), data_dir)
        try:
            yield databases
        finally:
            await databases.close()
        return
    url, prefix = request.getfixturevalue("postgres_apps_cluster")
    databases = await open_databases(url, data_dir, role_prefix=prefix)
    try:
        yield databases
    finally:
        await databases.close()
        await _drop_app_schemas(apps_database_url(url))


async def _drop_app_schemas(apps_url: str) -> None:
    conn = await asyncpg.connect(_dsn(apps_url), timeout=5)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        names = await conn.fetch("SELECT nspname FROM pg_namespace WHERE nspname ~ '^app_[0-9]+$'")
        for row in names:
            await conn.execute(f'DROP SCHEMA "{row["nspname"]}" CASCADE')
    finally:
        await conn.close()


async def _drop_apps_cluster(apps_database: str, prefix: str) -> None:
    conn = await asyncpg.connect(_dsn(POSTGRES_URL), timeout=5)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{apps_database}" WITH (FORCE)')
        roles = await conn.fetch(
            "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)", prefix
        )
        for row in roles:
            await conn.execute(f'DROP ROLE "{row["rolname"]}"')
    finally:
        await conn.close()
