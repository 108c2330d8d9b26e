"""Apps' PostgreSQL databases: a schema per app, owned by a role of the app's own, in a
database for apps apart from the platform's.

- The **apps database** (``<platform db>_apps`` unless ``APPDECK_APPS_DATABASE_URL`` names
  one) is created with the platform's connection when missing. In it, ``PUBLIC`` may not
  connect, create temporary tables or use the ``public`` schema: each app's role is granted
  ``CONNECT`` and ``TEMPORARY`` on it, and owns exactly one schema, ``app_<id>``. The
  platform's tables are in the other database: no role of an app is granted anything there.
- The **role** ``<prefix><id>`` (``APPDECK_APPS_ROLE_PREFIX``, default ``<apps db>_app_``:
  roles are cluster-wide, so two platforms on one cluster never share one) logs in with a
  random password, kept sealed (:class:`~appdeck.platform.crypto.Sealer`) in
  ``<data dir>/appdb-pg/``, and has a connection limit.
- The platform's own transactions on an app's database **log in as the app's role** (an
  engine per app, in a bounded LRU) and run ``SET LOCAL search_path = app_<id>`` and
  ``SET LOCAL statement_timeout``. Not ``SET ROLE`` from the platform's login: ``SET ROLE``
  is checked against the session's user, so code the app defined (a trigger, a default, a
  check calling an SQL function) could ``RESET ROLE`` or ``set_config('role', …)`` back to
  the platform's superuser in the middle of the platform's transaction. Logged in as the
  app's role, there is nobody else to become. The platform's own login (``admin``) only makes
  and drops roles and schemas, and runs no code of an app.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, Literal

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from appdeck.platform.crypto import Sealer
from appdeck.platform.tables.engines import EngineCache
from appdeck.runtime.appdb import DatabaseGrant, PostgresTarget
from appdeck.storage.engine import create_engine

ROLE_PREFIX: Final = re.compile(r"[a-z_][a-z0-9_]{0,39}")
CONNECTION_LIMIT: Final = 20
"""Connections one app's role may hold at once (the server's own transactions included)."""
_SETUP_LOCK: Final = 0x61707064  # an advisory lock key: one platform sets a role up at a time
_CREATE_LOCK: Final = 0x61707065  # another: one platform creates the apps database at a time


def default_role_prefix(apps_url: str) -> str:
    """``<apps database>_app_``: roles are cluster-wide, the apps database is not, so two
    platforms (or test modules) on one cluster never share a role."""
    name = re.sub(r"[^a-z0-9_]", "_", str(make_url(apps_url).database).lower())
    return f"{name[:35]}_app_" if name[:1].isalpha() else f"a{name[:34]}_app_"


def _quote(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_]{1,63}", name):
        raise ValueError(f"unsafe identifier {name!r}")
    return f'"{name}"'


class PostgresSchemas:
    """The apps' schemas and roles (see the module docstring)."""

    dialect: Literal["postgresql"] = "postgresql"

    def __init__(
        self,
        admin: AsyncEngine,
        *,
        role_prefix: str,
        secrets_dir: Path,
        sealer: Sealer,
        max_engines: int = 16,
    ) -> None:
        if not ROLE_PREFIX.fullmatch(role_prefix):
            raise ValueError(f"invalid role prefix {role_prefix!r}: [a-z_][a-z0-9_]*, 40 at most")
        self.admin = admin
        """The platform's login on the apps database: roles and schemas, nothing of an app's."""
        url = admin.url
        self.database = str(url.database)
        self.host = url.host or "127.0.0.1"
        self.port = url.port or 5432
        self.role_prefix = role_prefix
        self.secrets_dir = secrets_dir
        self.sealer = sealer
        self._engines = EngineCache(self._open, max_engines)
        self._ready: set[int] = set()
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        platform_url: str,
        apps_url: str,
        *,
        role_prefix: str | None,
        secrets_dir: Path,
        sealer: Sealer,
    ) -> PostgresSchemas:
        """Create the apps database if missing (with the platform's connection), and close
        it to ``PUBLIC``."""
        await _create_database(platform_url, make_url(apps_url).database or "")
        engine = create_engine(apps_url)
        try:
            async with engine.begin() as conn:
                # replicas starting together: one at a time (concurrent GRANT/REVOKE on one
                # object fails "tuple concurrently updated")
                await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_SETUP_LOCK})")
                name = _quote(str(engine.url.database))
                await conn.exec_driver_sql(f"REVOKE ALL ON DATABASE {name} FROM PUBLIC")
                await conn.exec_driver_sql("REVOKE ALL ON SCHEMA public FROM PUBLIC")
                await _hide_other_databases(conn)
        except BaseException:
            await engine.dispose()
            raise
        prefix = role_prefix if role_prefix is not None else default_role_prefix(apps_url)
        return cls(engine, role_prefix=prefix, secrets_dir=secrets_dir, sealer=sealer)

    def role(self, app_id: int) -> str:
        return f"{self.role_prefix}{int(app_id)}"

    @staticmethod
    def schema(app_id: int) -> str:
        return f"app_{int(app_id)}"

    # ------------------------------------------------------------------ transactions

    @asynccontextmanager
    async def transaction(
        self, app_id: int, *, timeout_s: float, readonly: bool, cascades: bool = True
    ) -> AsyncIterator[AsyncConnection]:
        async with self._engines.using(app_id) as engine, engine.connect() as conn:
            await conn.begin()
            try:
                if readonly:
                    await conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                await conn.exec_driver_sql(  # SET LOCAL, both, in one round trip
                    "SELECT set_config('search_path', $1, true),"
                    " set_config('statement_timeout', $2, true)",
                    (_quote(self.schema(app_id)), str(max(1, int(timeout_s * 1000)))),
                )
                yield conn
            except BaseException:
                await conn.rollback()
                raise
            await conn.commit()

    async def _open(self, app_id: int) -> AsyncEngine:
        """An engine that logs in as the app's role (see the module docstring)."""
        await self._ensure(app_id)
        password = await asyncio.to_thread(self._password, self.role(app_id))
        url = self.admin.url.set(username=self.role(app_id), password=password)
        return create_async_engine(
            url, pool_size=2, max_overflow=3, pool_timeout=30, pool_recycle=1800, pool_pre_ping=True
        )

    def is_timeout(self, exc: DBAPIError) -> bool:
        return getattr(exc.orig, "sqlstate", None) == "57014" or "statement timeout" in str(
            exc.orig
        )

    async def _ensure(self, app_id: int) -> None:
        """The app's role and schema, once per process (idempotent across processes)."""
        if app_id in self._ready:
            return
        async with self._lock:
            if app_id in self._ready:
                return
            role, schema = _quote(self.role(app_id)), _quote(self.schema(app_id))
            async with self.admin.begin() as conn:
                await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_SETUP_LOCK})")
                found = await conn.exec_driver_sql(
                    "SELECT 1 FROM pg_roles WHERE rolname = $1", (self.role(app_id),)
                )
                if found.first() is None:
                    await conn.exec_driver_sql(f"CREATE ROLE {role}")
                password = await asyncio.to_thread(self._password, self.role(app_id))
                await conn.exec_driver_sql(  # token_hex: [0-9a-f] only
                    f"ALTER ROLE {role} LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB"
                    f" NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT {CONNECTION_LIMIT}"
                )
                superuser = await conn.exec_driver_sql(
                    "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                )
                if not superuser.scalar():
                    await conn.exec_driver_sql(f"GRANT {role} TO current_user")
                database = _quote(self.database)
                await conn.exec_driver_sql(
                    f"GRANT CONNECT, TEMPORARY ON DATABASE {database} TO {role}"
                )
                await conn.exec_driver_sql(
                    f"CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {role}"
                )
                # the app's own sessions (DATABASE_URL) start in its schema too
                await conn.exec_driver_sql(
                    f"ALTER ROLE {role} IN DATABASE {database} SET search_path = {schema}"
                )
            self._ready.add(app_id)

    # ------------------------------------------------------------------ the app's end

    async def grant(self, app_id: int, *, sandboxed: bool) -> DatabaseGrant:
        """The role's URL (its password made on first use, kept sealed)."""
        await self._ensure(app_id)
        role = self.role(app_id)
        password = await asyncio.to_thread(self._password, role)
        host, port = ("127.0.0.1", 5432) if sandboxed else (self.host, self.port)
        url = f"postgresql://{role}:{password}@{host}:{port}/{self.database}"
        target = PostgresTarget(self.host, self.port, role, self.database) if sandboxed else None
        return DatabaseGrant(env={"DATABASE_URL": url}, postgres=target)

    def _password(self, role: str) -> str:
        path = self.secrets_dir / f"{role}.sealed"
        with contextlib.suppress(FileNotFoundError):
            return self.sealer.open(path.read_text().strip())
        self.secrets_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        password = secrets.token_hex(24)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.sealer.seal(password))
        return password

    async def drop(self, app_id: int) -> None:
        role, schema = self.role(app_id), self.schema(app_id)
        await self._engines.forget(app_id)
        async with self._lock:
            self._ready.discard(app_id)
            async with self.admin.begin() as conn:
                await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_SETUP_LOCK})")
                await conn.exec_driver_sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE usename = $1 AND pid <> pg_backend_pid()",
                    (role,),
                )
                await conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {_quote(schema)} CASCADE")
                exists = await conn.exec_driver_sql(
                    "SELECT 1 FROM pg_roles WHERE rolname = $1", (role,)
                )
                if exists.first() is not None:
                    await conn.exec_driver_sql(f"DROP OWNED BY {_quote(role)}")
                    await conn.exec_driver_sql(f"DROP ROLE {_quote(role)}")
        with contextlib.suppress(FileNotFoundError):
            (self.secrets_dir / f"{role}.sealed").unlink()

    async def close(self) -> None:
        await self._engines.close()
        await self.admin.dispose()


async def _create_database(platform_url: str, name: str) -> None:
    """``CREATE DATABASE name`` with the platform's connection, unless it exists. Replicas
    starting at once on a fresh database (issue 20, item 2) take turns on an advisory lock;
    a database created meanwhile by a platform that takes no lock is not an error either."""
    engine = create_engine(platform_url)
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql(f"SELECT pg_advisory_lock({_CREATE_LOCK})")
            try:
                found = await conn.exec_driver_sql(
                    "SELECT 1 FROM pg_database WHERE datname = $1", (name,)
                )
                if found.first() is None:
                    try:
                        await conn.exec_driver_sql(f"CREATE DATABASE {_quote(name)}")
                    except DBAPIError as exc:
                        # 42P04 duplicate_database; 23505: the catalog's unique index, when
                        # two CREATE DATABASE race
                        if getattr(exc.orig, "sqlstate", None) not in ("42P04", "23505"):
                            raise
            finally:
                await conn.exec_driver_sql(f"SELECT pg_advisory_unlock({_CREATE_LOCK})")
    finally:
        await engine.dispose()


_HIDDEN: Final = (
    "pg_catalog.pg_database",
    "pg_catalog.pg_stat_database",
    "pg_catalog.pg_stat_database_conflicts",
    "pg_catalog.pg_stat_activity",
    "pg_catalog.pg_stat_ssl",
    "pg_catalog.pg_stat_gssapi",
    "pg_catalog.pg_prepared_xacts",
    "pg_catalog.pg_replication_slots",
    "pg_catalog.pg_stat_replication_slots",
    "pg_catalog.pg_stat_progress_vacuum",
    "pg_catalog.pg_stat_progress_analyze",
    "pg_catalog.pg_stat_progress_cluster",
    "pg_catalog.pg_stat_progress_create_index",
    "pg_catalog.pg_stat_progress_copy",
    "pg_catalog.pg_stat_progress_basebackup",
    "pg_catalog.pg_shdescription",
)
"""Catalogs and views that name (or would let a role name) the cluster's other databases."""


async def _hide_other_databases(conn: AsyncConnection) -> None:
    """In the apps database ``PUBLIC`` may not read :data:`_HIDDEN`: an app's role sees no
    other database's name (issue 19, finding 8). ``current_database()`` still names its
    own; the platform's login (the catalogs' owner, or a superuser) still reads them all.
    A login that owns none of them gets a warning from PostgreSQL and changes nothing."""
    for relation in _HIDDEN:
        found = await conn.exec_driver_sql("SELECT to_regclass($1)", (relation,))
        if found.scalar() is not None:
            # a name of the constant list above, never a caller's
            await conn.exec_driver_sql(f"REVOKE SELECT ON {relation} FROM PUBLIC")  # noqa: S608
