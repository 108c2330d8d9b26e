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

import gc

# No cyclic collection while the suite loads, as `appdeck serve` does while it imports
# (appdeck.tuning.hold_gc): importing ~450 test modules and what they use, and collecting
# ~3,900 items, all kept to the end, made the collector walk that growing heap ~30 times (a
# third of a collection's CPU, in each of the four workers and the warm-up). The hold ends at
# pytest_collection_finish (collected, frozen, thresholds raised), or at once in an xdist
# controller, which collects nothing (pytest_configure).
gc.disable()

import asyncio
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from appdeck.storage import Storage, default_sqlite_url
from appdeck.storage.migrate import head_revision
from appdeck.tuning import release_gc, tune_gc
from tests.support.templates import copy_into, migrated, sqlite_template

POSTGRES_URL = os.environ.get(
    "APPDECK_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)

T = TypeVar("T")

# every Services a test starts picks a free ingress port (a dev server may hold 8088)
os.environ.setdefault("APPDECK_INGRESS_PORT", "0")
os.environ["APPDECK_TEST_FAST_PASSWORD_HASHES"] = "1"  # appdeck.auth.hashing.FAST_FOR_TESTS


def _bytecode_outside_the_trees() -> None:
    """With ``PYTHONDONTWRITEBYTECODE`` set (CI's and this VM's shells set it), every Python
    subprocess of the suite (``appdeck serve``, CLI calls, instance shims: thousands) compiled
    AppDeck's ~400 modules from source again: 0.4 CPU-s of each start. They (and the xdist
    workers, spawned after this runs) keep their bytecode in a cache of this user's instead,
    outside the source and venv trees, which stay as clean as the setting wanted. Apps never
    see either variable (``runtime.core.PASSED_ENV``)."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or "PYTHONPYCACHEPREFIX" in os.environ:
        return
    cache = Path(tempfile.gettempdir()) / f"appdeck-test-pycache-{os.getuid()}"
    try:
        cache.mkdir(mode=0o700, exist_ok=True)
        owned = cache.lstat()
    except OSError:
        return
    if not stat.S_ISDIR(owned.st_mode) or owned.st_uid != os.getuid() or owned.st_mode & 0o022:
        return  # not ours alone: bytecode others could write is never loaded
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache)
    del os.environ["PYTHONDONTWRITEBYTECODE"]


_bytecode_outside_the_trees()


def _one_default_tls_context() -> None:
    """The suite's httpx clients share httpx's default TLS context instead of each loading
    certifi's CA bundle anew (~20 ms of CPU; the suite makes ~600 clients, most of them for
    plain-http URLs). Only the default (``verify=True``, no client certificate) is shared,
    one per setting of the environment it reads; a test that needs another CA passes its
    own context, which is never cached. Nothing in the suite changes a context it did not
    make."""
    import functools
    import ssl

    from httpx._transports import default as transports

    made = transports.create_ssl_context

    @functools.cache
    def shared(trust_env: bool, cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
        return made(verify=True, cert=None, trust_env=trust_env)

    def create_ssl_context(
        verify: ssl.SSLContext | str | bool = True, cert: Any = None, trust_env: bool = True
    ) -> ssl.SSLContext:
        if verify is True and cert is None:
            return shared(
                trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
            )
        return made(verify=verify, cert=cert, trust_env=trust_env)

    transports.create_ssl_context = create_ssl_context  # type: ignore[assignment]


_one_default_tls_context()
# Servers (in-process or not) need no cgroup name or uid base of their own: each data dir is
# an install with its own (issue 19), whatever other test sessions run on the host. A
# per-worker name did not keep two sessions' workers apart (two "appdeck-gw1"s, one "1-1").

pytest_plugins = ["tests.support.redis"]  # the redis and redis_prefix fixtures


def pytest_configure(config: pytest.Config) -> None:
    """An xdist controller collects nothing: the hold on the collector (above) ends now."""
    workers = getattr(config.option, "numprocesses", None)
    if workers and not os.environ.get("PYTEST_XDIST_WORKER"):
        release_gc()


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (every module, test item and fixture definition, kept to the
    end) is moved out of the collector's sight, and the young generation is collected less
    often, as ``appdeck serve`` does once started (``appdeck.tuning.tune_gc``): with the
    defaults, every few hundred allocations of a test walked that heap again (10-18 % of
    an in-process tool test's CPU). Cycles are still collected, only later."""
    tune_gc()


SLOW_LIST = Path(__file__).with_name("slow.txt")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` the tests tests/slow.txt names (a second or more each in a quick run:
    they start processes or wait on purpose): ``make quick`` leaves them out (``-m "not
    slow"``), ``make test`` runs them. The list is a speed hint made by ``make slow-list``; a
    test missing from it only makes the quick run slower."""
    slow = {
        line.strip()
        for line in SLOW_LIST.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs without the hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the replica-set modules on one worker (tests/support/scheduling)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.support.scheduling import ReplicaSetsTogether

    return ReplicaSetsTogether(config, log)


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
def migrated_sqlite() -> Callable[[Path], str]:
    """Puts a copy of the worker's migrated template where a server whose ``data_dir`` is the
    given directory keeps its database (``appdeck.db`` in it) and returns its URL: for the
    fixtures that start a server on SQLite without ``database_url``, which would otherwise
    migrate a fresh file from zero (0.3-0.5 s of CPU each)."""

    def put(data_dir: Path) -> str:
        copy_into(data_dir)
        return default_sqlite_url(data_dir)

    return put


@pytest.fixture(scope="session")
def _sqlite_template() -> Path:
    """A SQLite file migrated to the newest schema, once per worker (the one
    :func:`~tests.support.templates.sqlite_template` makes for the servers the tests start)."""
    return sqlite_template()


@dataclass(frozen=True, slots=True)
class _Template:
    name: str
    tables: frozenset[str]
    """The tables a database made from it has, ``alembic_version`` included."""
    shape: frozenset[tuple[str, ...]]
    """What a database made from it holds beyond rows (:func:`_shape`)."""


@pytest.fixture(scope="session")
def _postgres_template() -> Iterator[_Template]:
    """A PostgreSQL database migrated to the newest schema, once per worker, then marked a
    template that takes no connections (not even autovacuum's: ``CREATE DATABASE … TEMPLATE``
    fails while anyone is connected to it)."""
    name = f"appdeck_template_{secrets.token_hex(6)}"
    _create_database(name)
    try:
        url = _url_of(name)
        _on_private_loop(migrated(url))
        tables = frozenset(_on_private_loop(_tables(url)))
        shape = _on_private_loop(_shape(url))
        _on_private_loop(
            _admin(f'ALTER DATABASE "{name}" IS_TEMPLATE true ALLOW_CONNECTIONS false')
        )
        yield _Template(name, tables, shape)
    finally:
        _on_private_loop(_admin(f'ALTER DATABASE "{name}" IS_TEMPLATE false'))
        _on_private_loop(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@dataclass
class _Pool:
    """The worker's module databases. ``DROP DATABASE`` makes PostgreSQL take a checkpoint
    (every dirty page of every database on the server written out: 2-5 s on this loaded host,
    twice per module with its apps database), so a module's database is not dropped when the
    module is done: the next module on the worker takes it back, at the template's shape and
    without rows (:func:`_take`); only the session's end drops them."""

    template: _Template
    free: list[str]
    made: list[str]


@pytest.fixture(scope="session")
def _postgres_pool(_postgres_template: _Template) -> Iterator[_Pool]:
    pool = _Pool(_postgres_template, [], [])
    try:
        yield pool
    finally:
        for name in pool.made:
            _on_private_loop(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            _on_private_loop(_drop_apps_of(name))


@pytest.fixture(scope="module")
def postgres_module_database(_postgres_pool: _Pool) -> Iterator[str]:
    """A PostgreSQL database of this test module's own, at the newest schema and without rows
    when the module starts (made from the template, or one an earlier module on this worker
    finished with, brought back to the template: :class:`_Pool`)."""
    name = _take(_postgres_pool)
    yield _url_of(name)
    _give_back(_postgres_pool, name)


def _take(pool: _Pool) -> str:
    """A database at the template's shape, with no rows, no apps' roles and no apps' schemas:
    a free one brought back to that, or a new one from the template."""
    while pool.free:
        name = pool.free.pop()
        url = _url_of(name)
        try:
            if _on_private_loop(_shape(url)) == pool.template.shape:
                _on_private_loop(_reset(url, pool.template))
                return name
        except (OSError, asyncpg.PostgresError, TimeoutError):
            pass
        _forget(pool, name)  # changed beyond rows (or unreadable): made again below
    name = f"appdeck_test_{secrets.token_hex(6)}"
    _create_database(name, pool.template.name)
    pool.made.append(name)
    return name


def _give_back(pool: _Pool, name: str) -> None:
    """``name`` free for the next module once its apps' roles and schemas are gone (what the
    platform's own ``drop`` of an app does); dropped with its apps database when they cannot be
    taken away."""
    try:
        _on_private_loop(_clear_apps_of(name))
    except (OSError, asyncpg.PostgresError, TimeoutError, AssertionError):
        _forget(pool, name)
        return
    pool.free.append(name)


def _forget(pool: _Pool, name: str) -> None:
    pool.made.remove(name)
    _on_private_loop(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    _on_private_loop(_drop_apps_of(name))


async def _clear_apps_of(name: str) -> None:
    """In the apps database a platform on ``name`` made (``<name>_apps``, when there is one):
    every app's role's objects and privileges dropped, then the roles; AssertionError when
    anything but the empty ``public`` schema is left in it."""
    apps = f"{name}_apps"
    admin = await asyncpg.connect(_dsn(POSTGRES_URL), timeout=5)
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", apps):
            return
        roles = [
            row["rolname"]
            for row in await admin.fetch(
                "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)", f"{apps}_app_"
            )
        ]
        conn = await asyncpg.connect(_dsn(_url_of(apps)), timeout=5)
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            for role in roles:
                await conn.execute(f'DROP OWNED BY "{role}" CASCADE')
            left = await conn.fetchval(
                "SELECT count(*) FROM pg_namespace WHERE nspname <> 'public' "
                "AND nspname <> 'information_schema' AND nspname NOT LIKE 'pg\\_%'"
            ) + await conn.fetchval(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public'"
            )
            assert left == 0, f"{apps} keeps {left} schemas or relations"
        finally:
            await conn.close()
        for role in roles:
            await admin.execute(f'DROP ROLE "{role}"')
    finally:
        await admin.close()


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
        _on_private_loop(_admin(statement, _no_commit_wait(name)))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        message = f"PostgreSQL at {make_url(POSTGRES_URL)!r} is unreachable: {exc!r}"
        if os.environ.get("APPDECK_TEST_NO_POSTGRES") == "1":
            pytest.skip(message)
        pytest.fail(f"{message} (set APPDECK_TEST_NO_POSTGRES=1 to skip PostgreSQL tests)")


def _url_of(name: str) -> str:
    return make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)


async def _shape(url: str) -> frozenset[tuple[str, ...]]:
    """What a database holds beyond its rows: its schemas, relations (tables, indexes,
    sequences, views), columns, constraints, functions, types, triggers, extensions and
    database settings, by name. Two databases of one shape differ only in rows."""
    conn = await asyncpg.connect(_dsn(url), timeout=5)
    try:
        rows = await conn.fetch(_SHAPE)
        return frozenset(tuple(str(v) for v in row.values()) for row in rows)
    finally:
        await conn.close()


_OWN = "n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'"  # not the system's
_SHAPE = f"""
SELECT 'schema', n.nspname, '', '' FROM pg_namespace n WHERE {_OWN}
UNION ALL SELECT 'relation', n.nspname, c.relname, c.relkind::text
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_OWN}
UNION ALL SELECT 'column', table_schema || '.' || table_name, column_name,
  concat_ws(' ', data_type, is_nullable, column_default)
  FROM information_schema.columns
  WHERE table_schema <> 'information_schema' AND table_schema NOT LIKE 'pg\\_%'
UNION ALL SELECT 'constraint', n.nspname, c.conname, pg_get_constraintdef(c.oid)
  FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE {_OWN}
UNION ALL SELECT 'function', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {_OWN}
UNION ALL SELECT 'type', n.nspname, t.typname, t.typtype::text
  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE {_OWN}
UNION ALL SELECT 'trigger', c.relname, t.tgname, ''
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal
UNION ALL SELECT 'extension', extname, extversion, '' FROM pg_extension
UNION ALL SELECT 'setting', coalesce(array_to_string(setconfig, ','), ''), setrole::text, ''
  FROM pg_db_role_setting WHERE setdatabase = (
    SELECT oid FROM pg_database WHERE datname = current_database())
"""


async def _tables(url: str) -> list[str]:
    conn = await asyncpg.connect(_dsn(url), timeout=5)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return [row["tablename"] for row in rows]
    finally:
        await conn.close()


_CLEAR = """
DO $$
DECLARE
  name text;
  used record;
BEGIN
  -- no foreign key trigger fires: the order of the deletes does not matter
  SET LOCAL session_replication_role = replica;
  FOR name IN
    SELECT tablename FROM pg_tables
    WHERE schemaname = 'public' AND tablename <> 'alembic_version' ORDER BY tablename
  LOOP
    EXECUTE format('DELETE FROM public.%I', name);
  END LOOP;
  -- a sequence nothing has drawn from (last_value null) is at its start already
  FOR used IN
    SELECT sequencename, start_value FROM pg_sequences
    WHERE schemaname = 'public' AND last_value IS NOT NULL
  LOOP
    PERFORM setval(format('public.%I', used.sequencename), used.start_value, false);
  END LOOP;
END $$
"""
"""Every row of the public schema deleted and every sequence drawn from set back to its start,
in one statement (one round trip, one transaction): ~14 ms of the server's CPU against ~20
for a statement per table and sequence, on every PostgreSQL test."""


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
            await conn.execute(_CLEAR)
            return
    finally:
        await conn.close()
    name = str(make_url(url).database)
    await _admin(
        f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
        f'CREATE DATABASE "{name}" TEMPLATE "{template.name}"',
        _no_commit_wait(name),
    )


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


async def _admin(*statements: str) -> None:
    """``statements`` one after the other, each in a transaction of its own."""
    conn = await asyncpg.connect(_dsn(POSTGRES_URL), timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def _no_commit_wait(name: str) -> str:
    """The setting that lets a commit in database ``name`` return before its WAL is on disk
    (``synchronous_commit = off``): a test's database need not survive a crash of the server,
    and on this loaded host waiting for the flush is ~8 ms a commit against ~1 (issue 26 §3).
    What a committed transaction shows to every other connection is unchanged; only a crash
    of the PostgreSQL server could lose the last commits. A database made from a template does
    not inherit it: each test database is given it when made."""
    return f'ALTER DATABASE "{name}" SET synchronous_commit = off'


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
    from tests.support.installs import release_installs_under

    release_installs_under(Path(root))  # its uid ranges, given back (tests/support/installs.py)
