"""Database fixtures: every test that asks for ``database_url`` runs on SQLite and PostgreSQL.

Each test gets an empty database. SQLite: a file in the test's tmp dir. PostgreSQL (the server
at ``APPDECK_TEST_POSTGRES_URL``, default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``):
a uniquely named database per test module, dropped after it, whose ``public`` schema is emptied
before each test. When that server is unreachable the PostgreSQL tests fail, unless
``APPDECK_TEST_NO_POSTGRES=1`` says to skip them.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from appdeck.storage import Storage, default_sqlite_url

POSTGRES_URL = os.environ.get(
    "APPDECK_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)

T = TypeVar("T")

# every Services a test starts picks a free ingress port (a dev server may hold 8088)
os.environ.setdefault("APPDECK_INGRESS_PORT", "0")
# Servers (in-process or not) need no cgroup name or uid base of their own: each data dir is
# an install with its own (issue 19), whatever other test sessions run on the host. A
# per-worker name did not keep two sessions' workers apart (two "appdeck-gw1"s, one "1-1").

pytest_plugins = ["tests.support.redis"]  # the redis and redis_prefix fixtures


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database that no other test uses."""
    if request.param == "sqlite":
        return default_sqlite_url(tmp_path)
    url: str = request.getfixturevalue("postgres_module_database")
    _on_private_loop(_empty_public_schema(url))
    return url


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    """An opened (and migrated) :class:`Storage` on a fresh database."""
    opened = await Storage.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(scope="module")
def postgres_module_database() -> Iterator[str]:
    """A PostgreSQL database of this test module's own, dropped when the module is done."""
    yield from _postgres_database()


@pytest.fixture
def postgres_test_database() -> Iterator[str]:
    """A PostgreSQL database of this test's own (servers that keep state in it: a secret key,
    a dev tenant), dropped when the test is done."""
    yield from _postgres_database()


def _postgres_database() -> Iterator[str]:
    name = f"appdeck_test_{secrets.token_hex(6)}"
    try:
        _on_private_loop(_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        message = f"PostgreSQL at {make_url(POSTGRES_URL)!r} is unreachable: {exc!r}"
        if os.environ.get("APPDECK_TEST_NO_POSTGRES") == "1":
            pytest.skip(message)
        pytest.fail(f"{message} (set APPDECK_TEST_NO_POSTGRES=1 to skip PostgreSQL tests)")
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        _on_private_loop(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        _on_private_loop(_drop_apps_of(name))


async def _drop_apps_of(name: str) -> None:
    """The apps database a platform on ``name`` made (``<name>_apps``), and its apps' roles
    (``<name>_apps_app_<id>``: roles outlive databases)."""
    await _admin(f'DROP DATABASE IF EXISTS "{name}_apps" WITH (FORCE)')
    conn = await asyncpg.connect(_dsn(POSTGRES_URL), timeout=5)
    try:
        roles = await conn.fetch(
            "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)", f"{name}_apps_app_"
        )
        for row in roles:
            await conn.execute(f'DROP ROLE IF EXISTS "{row["rolname"]}"')
    finally:
        await conn.close()


def _on_private_loop(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to the end on a loop of its own, in a thread: fixtures of any scope can
    use it without touching the event loops pytest-asyncio gives the tests."""
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, work).result(timeout=60)


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _admin(statement: str) -> None:
    conn = await asyncpg.connect(_dsn(POSTGRES_URL), timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def _empty_public_schema(url: str) -> None:
    conn = await asyncpg.connect(_dsn(url), timeout=5)
    try:
        # a connection some earlier test leaked must not hold a lock on what is dropped
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        await conn.close()


@pytest.fixture(autouse=True)
def _app_disks_unmounted(request: pytest.FixtureRequest) -> Iterator[None]:
    """App disks (loop-mounted images, issue 19) outlive a server by design: whatever a test
    left mounted under its ``tmp_path`` is unmounted after it (the loop device goes with it)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    root = f"{request.getfixturevalue('tmp_path')}/"  # now: torn down after this fixture
    yield
    from appdeck.runtime.disks import unmount_under

    unmount_under(root)
    from tests.support.appdeck_process import reap_haproxy

    reap_haproxy(Path(root))  # issue 21: the data plane outlives a server by design
