"""Database fixtures: every test that asks for ``database_url`` runs on SQLite and PostgreSQL.

PostgreSQL is the server at ``APPDECK_TEST_POSTGRES_URL`` (default
``postgresql+asyncpg://postgres@127.0.0.1:5432/test``); each test gets a fresh database there,
dropped afterwards. When the server is unreachable the PostgreSQL tests fail, unless
``APPDECK_TEST_NO_POSTGRES=1`` says to skip them.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from appdeck.storage import Storage, default_sqlite_url

POSTGRES_URL = os.environ.get(
    "APPDECK_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of an empty database that no other test uses."""
    if request.param == "sqlite":
        yield default_sqlite_url(tmp_path)
        return
    admin = await _postgres_admin()
    name = f"appdeck_test_{secrets.token_hex(6)}"
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.dispose()


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    """An opened (and migrated) :class:`Storage` on a fresh database."""
    opened = await Storage.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()


async def _postgres_admin() -> AsyncEngine:
    """An autocommit engine on the maintenance database; fails (or skips) when unreachable."""
    admin = create_async_engine(
        POSTGRES_URL, isolation_level="AUTOCOMMIT", connect_args={"timeout": 5}
    )
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")
    except Exception as exc:
        await admin.dispose()
        message = f"PostgreSQL at {make_url(POSTGRES_URL)!r} is unreachable: {exc!r}"
        if os.environ.get("APPDECK_TEST_NO_POSTGRES") == "1":
            pytest.skip(message)
        pytest.fail(f"{message} (set APPDECK_TEST_NO_POSTGRES=1 to skip PostgreSQL tests)")
    return admin
