"""Each app's own database, as the platform reaches it (the app itself reaches it through
``DATABASE_URL``: see :meth:`AppDatabases.grant` and docs/tables.md, "The app's database").

- **SQLite** (the platform runs on SQLite): one file per app, ``<data dir>/appdb/<id>/app.db``
  (:mod:`.appdb_sqlite`).
- **PostgreSQL** (the platform runs on PostgreSQL): a database for apps apart from the
  platform's (``<platform db>_apps``, or ``APPDECK_APPS_DATABASE_URL``), holding a schema
  ``app_<id>`` per app owned by a role of the app's own (:mod:`.appdb_postgres`).

:meth:`AppDatabases.transaction` is the one way in for the platform's services: one
transaction on one app's database, under a time limit (:class:`QueryTimeout` past it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Literal, Protocol

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from appdeck.common.errors import InvalidArgument, QuotaExceeded, Unavailable
from appdeck.platform.crypto import Sealer
from appdeck.platform.tables.appdb_postgres import PostgresSchemas
from appdeck.platform.tables.appdb_sqlite import MAX_LENGTH, SqliteFiles
from appdeck.runtime.appdb import DatabaseGrant

Dialect = Literal["sqlite", "postgresql"]

MAX_TIMEOUT_S = 300.0


class QueryTimeout(QuotaExceeded):
    """A statement on an app's database ran past its time limit and was stopped."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            f"the query ran longer than {timeout_s:g} s and was stopped",
            hint="narrow the filter, add an index, or ask for fewer rows",
            timeout_s=timeout_s,
        )


class _Backend(Protocol):
    @property
    def dialect(self) -> Dialect: ...

    def transaction(
        self, app_id: int, *, timeout_s: float, readonly: bool, cascades: bool = True
    ) -> AbstractAsyncContextManager[AsyncConnection]: ...

    async def grant(self, app_id: int, *, sandboxed: bool) -> DatabaseGrant: ...

    async def drop(self, app_id: int) -> None: ...

    async def close(self) -> None: ...

    def is_timeout(self, exc: DBAPIError) -> bool: ...


class AppDatabases:
    """The apps' databases (see the module docstring)."""

    def __init__(
        self, backend: _Backend, *, place: Callable[[int], Awaitable[None]] | None = None
    ) -> None:
        self._backend = backend
        self.dialect: Dialect = backend.dialect
        self.place = place
        """Called before an app's SQLite directory is used: the runtime puts it on the app's
        disk (issue 19; ``AppDisks.place``)."""

    @asynccontextmanager
    async def transaction(
        self,
        app_id: int,
        *,
        timeout_s: float = 5.0,
        readonly: bool = False,
        cascades: bool = True,
    ) -> AsyncIterator[AsyncConnection]:
        """One transaction on the app's own database (created on first use), committed on
        normal exit, rolled back on an exception. A statement past ``timeout_s`` is stopped
        and :class:`QueryTimeout` raised. ``readonly``: writes are refused. ``cascades``
        False (SQLite; PostgreSQL has no need): foreign keys are not enforced in it, so
        dropping a table being rebuilt deletes no row of a table referencing it; the commit
        is refused if the transaction left a foreign key broken that was not before."""
        _check_app_id(app_id)
        if not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}]")
        if self.place is not None and self.dialect == "sqlite":
            await self.place(app_id)
        try:
            async with self._backend.transaction(
                app_id, timeout_s=timeout_s, readonly=readonly, cascades=cascades
            ) as conn:
                yield conn
        except DBAPIError as exc:
            if self._backend.is_timeout(exc):
                raise QueryTimeout(timeout_s) from None
            if "string or blob too big" in str(exc.orig):
                raise InvalidArgument(
                    "a value or row in this statement is larger than the "
                    f"{MAX_LENGTH // 2**20} MiB the table tools handle (the app's own data, "
                    "or its own check, default or generated column)",
                    hint="nothing was written",
                ) from None
            if type(exc.orig).__name__ == "InvalidCachedStatementError":
                # the app changed the table (through DATABASE_URL) under a statement this
                # engine had prepared; the driver has forgotten its statements now
                raise Unavailable(
                    "the table changed while the statement ran", hint="retry the call"
                ) from None
            if getattr(exc.orig, "sqlstate", None) == "53300":  # too_many_connections
                raise Unavailable(
                    "the app's database has all the connections it may open in use",
                    hint="retry in a moment; the app itself may hold them",
                ) from None
            raise

    async def grant(self, app_id: int, *, sandboxed: bool) -> DatabaseGrant:
        """What an instance of the app needs to reach its database (``DATABASE_URL``, and
        for a sandbox the directory to bind or the PostgreSQL front to serve)."""
        _check_app_id(app_id)
        if self.place is not None and self.dialect == "sqlite":
            await self.place(app_id)
        return await self._backend.grant(app_id, sandboxed=sandboxed)

    async def drop(self, app_id: int) -> None:
        """The app is deleted: its database goes (SQLite: the directory; PostgreSQL: the
        schema and the role)."""
        _check_app_id(app_id)
        await self._backend.drop(app_id)

    async def close(self) -> None:
        await self._backend.close()


def forget_prepared_statements(conn: AsyncConnection) -> None:
    """The schema of the app's database changed in ``conn``'s transaction: every connection
    of its engine prepares its statements again (issue 20, item 13: asyncpg keeps prepared
    statements per connection, and one whose result types changed fails once,
    ``InvalidCachedStatementError``). SQLite keeps none: nothing to do."""
    invalidate = getattr(conn.dialect, "_invalidate_schema_cache", None)
    if callable(invalidate):  # SQLAlchemy's asyncpg dialect: statements cached before now
        invalidate()


def _check_app_id(app_id: int) -> None:
    if not isinstance(app_id, int) or isinstance(app_id, bool) or not 0 <= app_id < 2**31:
        raise InvalidArgument(f"invalid app id {app_id!r}")


def apps_database_url(platform_url: str) -> str:
    """The default apps database beside the platform's: ``<platform db>_apps``."""
    url = make_url(platform_url)
    return url.set(database=f"{url.database}_apps").render_as_string(hide_password=False)


async def open_databases(
    platform_url: str,
    data_dir: Path,
    *,
    apps_url: str | None = None,
    uid_for: Callable[[int], int] | None = None,
    role_prefix: str | None = None,
    secret_key: str | None = None,
    max_engines: int = 64,
    place: Callable[[int], Awaitable[None]] | None = None,
) -> AppDatabases:
    """The apps' databases for a platform whose own database is ``platform_url``: SQLite
    files under ``data_dir/appdb`` (owned by ``uid_for(app_id)`` when apps are sandboxed),
    or the PostgreSQL apps database (``apps_url``, default :func:`apps_database_url`).
    ``place``: puts an app's SQLite directory on its disk before it is used (``AppDisks.place``;
    the disks exist before the databases, the driver after both)."""
    if make_url(platform_url).get_backend_name() == "sqlite":
        files = SqliteFiles(data_dir / "appdb", uid_for=uid_for, max_engines=max_engines)
        return AppDatabases(files, place=place)
    backend = await PostgresSchemas.open(
        platform_url,
        apps_url or apps_database_url(platform_url),
        role_prefix=role_prefix,
        secrets_dir=data_dir / "appdb-pg",
        sealer=Sealer.from_settings(secret_key, data_dir),
    )
    return AppDatabases(backend, place=place)
