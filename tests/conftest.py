"""Database fixtures: every test that asks for ``database_url`` runs on SQLite and PostgreSQL.

Each test gets a database of its own at the newest schema, with no rows. It is not migrated per
test: each worker migrates one template per dialect once (a SQLite file; a PostgreSQL database
marked ``IS_TEMPLATE``) and every test starts from it — SQLite: a copy of the file in the
test's tmp dir; PostgreSQL: a uniquely named database per test module, made with ``CREATE
DATABASE … TEMPLATE``, dropped after it, whose rows are deleted (and sequences restarted)
before each test, or which is made again from the template when a test changed its schema.
``empty_database_url`` is the database with no schema at all, for the tests of migrating.

PostgreSQL is the server at ``APPDECK_TEST_POSTGRES_URL`` (default
``postgresql+asyncpg://postgres@127.0.0.1:5432/test``). When it is unreachable the PostgreSQL
tests fail, unless ``APPDECK_TEST_NO_POSTGRES=1`` says to skip them.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from appdeck.storage import Storage, create_engine, default_sqlite_url, migrate
from appdeck.storage.migrate import head_revision

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
    """The URL of a database at the newest schema, with no rows, that no other test uses."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("_sqlite_template")
        url = default_sqlite_url(tmp_path)
        shutil.copyfile(template, tmp_path / "appdeck.db")
        return url
    url = request.getfixturevalue("postgres_module_database")
    _on_private_loop(_reset(url, request.getfixturevalue("_postgres_template")))
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a database with no schema at all (not migrated), that no other test uses."""
    if request.param == "sqlite":
        return default_sqlite_url(tmp_path)
    url: str = request.getfixturevalue("postgres_module_database")
    _on_private_loop(_empty_public_schema(url))
    return url


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    """An opened :class:`Storage` on a database of this test's own."""
    opened = await Storage.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def migrated_sqlite(_sqlite_template: Path) -> Callable[[Path], str]:
    """Puts a copy of the worker's migrated template where a server whose ``data_dir`` is the
    given directory keeps its database (``appdeck.db`` in it) and returns its URL: for the
    fixtures that start a server on SQLite without ``database_url``, which would otherwise
    migrate a fresh file from zero (0.3-0.5 s of CPU each)."""

    def put(data_dir: Path) -> str:
        url = default_sqlite_url(data_dir)
        shutil.copyfile(_sqlite_template, data_dir / "appdeck.db")
        return url

    return put


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to the newest schema, once per worker."""
    directory = tmp_path_factory.mktemp("template")
    _on_private_loop(_migrated(default_sqlite_url(directory)))
    return directory / "appdeck.db"


@dataclass(frozen=True, slots=True)
class _Template:
    name: str
    tables: frozenset[str]
    """The tables a database made from it has, ``alembic_version`` included."""


@pytest.fixture(scope="session")
def _postgres_template() -> Iterator[_Template]:
    """A PostgreSQL database migrated to the newest schema, once per worker, then marked a
    template that takes no connections (not even autovacuum's: ``CREATE DATABASE … TEMPLATE``
    fails while anyone is connected to it)."""
    name = f"appdeck_template_{secrets.token_hex(6)}"
    _create_database(name)
    try:
        url = _url_of(name)
        _on_private_loop(_migrated(url))
        tables = frozenset(_on_private_loop(_tables(url)))
        _on_private_loop(
            _admin(f'ALTER DATABASE "{name}" IS_TEMPLATE true ALLOW_CONNECTIONS false')
        )
        yield _Template(name, tables)
    finally:
        _on_private_loop(_admin(f'ALTER DATABASE "{name}" IS_TEMPLATE false'))
        _on_private_loop(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="module")
def postgres_module_database(_postgres_template: _Template) -> Iterator[str]:
    """A PostgreSQL database of this test module's own (at the newest schema), dropped when the
    module is done."""
    yield from _postgres_database(_postgres_template.name)


@pytest.fixture
def postgres_test_database(_postgres_template: _Template) -> Iterator[str]:
    """A PostgreSQL database of this test's own (servers that keep state in it: a secret key,
    a dev tenant), at the newest schema, dropped when the test is done."""
    yield from _postgres_database(_postgres_template.name)


def _postgres_database(template: str) -> Iterator[str]:
    name = f"appdeck_test_{secrets.token_hex(6)}"
    _create_database(name, template)
    try:
        yield _url_of(name)
    finally:
        _on_private_loop(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        _on_private_loop(_drop_apps_of(name))


def _create_database(name: str, template: str | None = None) -> None:
    statement = f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
    try:
        _on_private_loop(_admin(statement))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        message = f"PostgreSQL at {make_url(POSTGRES_URL)!r} is unreachable: {exc!r}"
        if os.environ.get("APPDECK_TEST_NO_POSTGRES") == "1":
            pytest.skip(message)
        pytest.fail(f"{message} (set APPDECK_TEST_NO_POSTGRES=1 to skip PostgreSQL tests)")


def _url_of(name: str) -> str:
    return make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)


async def _migrated(url: str) -> None:
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


async def _tables(url: str) -> list[str]:
    conn = await asyncpg.connect(_dsn(url), timeout=5)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return [row["tablename"] for row in rows]
    finally:
        await conn.close()


async def _reset(url: str, template: _Template) -> None:
    """Bring the module's database back to the template: its rows deleted and its sequences
    restarted (tens of ms; ``TRUNCATE`` of every table takes a second or two), or, when an
    earlier test changed the schema, the database made again from the template."""
    conn = await asyncpg.connect(_dsn(url), timeout=5)
    try:
        # a connection some earlier test leaked must not hold a lock on what is deleted
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = {row["tablename"] for row in rows}
        if (
            tables == template.tables
            and await conn.fetchval("SELECT version_num FROM alembic_version") == head_revision()
        ):
            sequences = await conn.fetch(
                "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
            )
            async with conn.transaction():
                # no foreign key trigger fires: the order of the deletes does not matter
                await conn.execute("SET LOCAL session_replication_role = replica")
                for table in sorted(tables - {"alembic_version"}):
                    await conn.execute(f'DELETE FROM "{table}"')
                for row in sequences:
                    await conn.execute(f'ALTER SEQUENCE "{row["sequencename"]}" RESTART')
            return
    finally:
        await conn.close()
    name = str(make_url(url).database)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template.name}"')


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
