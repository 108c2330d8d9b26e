"""Apps' SQLite databases: one file per app, ``<root>/<app id>/app.db``.

The directory is the app's: bound read-write into its sandbox at ``/data`` and owned by its
uid (0700, the file 0600), so the app may put anything there, a symbolic link to the
platform's own database included. The server therefore never opens a path in it the usual
way: every connection's thread (aiosqlite gives each connection one) first takes a private
filesystem root of its own (``unshare(CLONE_FS)``, then ``chroot`` into the app's directory)
and opens ``/app.db`` there, so whatever the app links to resolves inside its own directory.
``app.db`` must be a regular file (no FIFO that would hang the open).

Each file has an engine of its own (WAL, busy timeout, foreign keys on, temporary storage in
memory); engines are kept in a bounded LRU and disposed of when evicted. A progress handler
stops a statement past the transaction's deadline (``interrupted``: :class:`QueryTimeout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import os
import shutil
import sqlite3
import stat
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, Literal

import aiosqlite
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from appdeck.common.errors import InvalidArgument, Unavailable
from appdeck.platform.tables.engines import EngineCache
from appdeck.runtime.appdb import DATA_DIR, DatabaseGrant
from appdeck.storage.engine import SQLITE_BUSY_TIMEOUT_MS, WRITE_ATTEMPTS, is_locked

FILE_NAME = "app.db"
_PROGRESS_STEPS = 1000
"""The progress handler runs every this many SQLite VM instructions."""
_CLONE_FS = 0x00000200
_DBCONFIG_DEFENSIVE = 1010
MAX_LENGTH = 128 * 1024 * 1024
"""The largest string, blob or row a statement on an app's file may make (SQLite's own limit
is 1 GB): 100 columns of 1 MiB fit; ``randomblob(1e9)`` in the app's SQL is refused."""
_TRIGGER_DEPTH = 4
"""Nested triggers (ours nest one deep; the app's are refused before a write)."""
_PRAGMAS = (
    "PRAGMA journal_mode = WAL",  # first: busy now, it is not waited for (see _open_confined)
    f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
    "PRAGMA temp_store = MEMORY",  # no temporary files in the app's directory
    "PRAGMA cell_size_check = ON",  # the file is the app's: check what is read from it
)


class _Deadline:
    """When the current transaction on one connection must stop (monotonic; 0: none)."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = 0.0

    def passed(self) -> int:
        return 1 if self.at and time.monotonic() > self.at else 0


class SqliteFiles:
    """The apps' SQLite files under ``root`` (see the module docstring)."""

    dialect: Literal["sqlite"] = "sqlite"

    def __init__(
        self,
        root: Path,
        *,
        uid_for: Callable[[int], int] | None = None,
        max_engines: int = 64,
    ) -> None:
        self.root = Path(root).resolve()
        self.uid_for = uid_for
        """None: apps are not sandboxed, their files are the server's."""
        self._engines = EngineCache(self._open, max_engines)
        self._deadlines: weakref.WeakKeyDictionary[aiosqlite.Connection, _Deadline] = (
            weakref.WeakKeyDictionary()
        )

    def directory(self, app_id: int) -> Path:
        return self.root / str(app_id)

    # ------------------------------------------------------------------ transactions

    @asynccontextmanager
    async def transaction(
        self, app_id: int, *, timeout_s: float, readonly: bool, cascades: bool = True
    ) -> AsyncIterator[AsyncConnection]:
        async with self._engines.using(app_id) as engine, engine.connect() as conn:
            raw = await conn.get_raw_connection()
            assert isinstance(raw.driver_connection, aiosqlite.Connection)
            deadline = self._deadlines[raw.driver_connection]
            deadline.at = time.monotonic() + timeout_s
            if not cascades:  # only outside a transaction (SQLite ignores it inside one)
                await conn.exec_driver_sql("PRAGMA foreign_keys = OFF")
            try:
                await _begin(conn, readonly=readonly, until=deadline.at)
                try:
                    broken = set() if cascades else await _broken_keys(conn)
                    yield conn
                    if not cascades:
                        await _refuse_new_broken_keys(conn, broken)
                except BaseException:
                    await conn.rollback()
                    raise
                await conn.commit()
            finally:
                deadline.at = 0.0
                if not cascades:
                    with contextlib.suppress(Exception):
                        await conn.exec_driver_sql("PRAGMA foreign_keys = ON")
                if readonly:
                    with contextlib.suppress(Exception):
                        await conn.exec_driver_sql("PRAGMA query_only = OFF")

    def is_timeout(self, exc: DBAPIError) -> bool:
        return "interrupted" in str(exc.orig).lower()

    async def _open(self, app_id: int) -> AsyncEngine:
        await asyncio.to_thread(self._prepare, app_id)
        return self._engine(app_id)

    # ------------------------------------------------------------------ files

    def _prepare(self, app_id: int) -> None:
        """The app's directory: 0700, the app's uid when sandboxed (the server's otherwise)."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory = self.directory(app_id)
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode):
            raise Unavailable(f"app {app_id}'s database directory is not a directory")
        if self.uid_for is not None:
            uid = self.uid_for(app_id)
            if (info.st_uid, info.st_gid) != (uid, uid):
                os.chown(directory, uid, uid, follow_symlinks=False)
        os.chmod(directory, 0o700, follow_symlinks=False)

    def _engine(self, app_id: int) -> AsyncEngine:
        directory = self.directory(app_id)
        uid = self.uid_for(app_id) if self.uid_for is not None else None

        async def connect() -> aiosqlite.Connection:
            deadline = _Deadline()
            connection = aiosqlite.Connection(
                lambda: _open_confined(directory, uid, deadline), iter_chunk_size=64
            )
            try:
                await connection
            except Exception:
                await _stopped(connection)
                raise
            self._deadlines[connection] = deadline
            return connection

        return create_async_engine(  # the URL names the dialect; connect() opens the file
            "sqlite+aiosqlite:///app.db",
            async_creator=connect,
            poolclass=AsyncAdaptedQueuePool,
            pool_size=2,  # a thread per connection (aiosqlite): at most 2 kept per engine
            max_overflow=2,
        )

    # ------------------------------------------------------------------ the app's end

    async def grant(self, app_id: int, *, sandboxed: bool) -> DatabaseGrant:
        await asyncio.to_thread(self._prepare, app_id)
        if not sandboxed:
            path = self.directory(app_id) / FILE_NAME
            return DatabaseGrant(env={"DATABASE_URL": f"sqlite:///{path}"})
        return DatabaseGrant(
            env={"DATABASE_URL": f"sqlite:///{DATA_DIR}/{FILE_NAME}"},
            bind=self.directory(app_id),
        )

    async def drop(self, app_id: int) -> None:
        await self._engines.forget(app_id)
        directory = self.directory(app_id)
        # rmtree works through descriptors and never follows the app's links
        await asyncio.to_thread(shutil.rmtree, directory, ignore_errors=True)

    async def close(self) -> None:
        await self._engines.close()


_STOP_WAIT_S = 5.0


async def _stopped(connection: aiosqlite.Connection) -> None:
    """Wait (bounded) for the worker thread of a connection that failed to open: aiosqlite
    stops it and the thread then posts to this loop, which must still be running when it does
    (a refused open, such as the app's link in place of its file, must not leave that post to
    a loop that may have closed since)."""
    thread = connection._thread  # aiosqlite has no public join
    await asyncio.to_thread(thread.join, _STOP_WAIT_S)


MAX_BROKEN_KEYS: Final = 10_000
"""Rows of ``PRAGMA foreign_key_check`` read (an app may have broken its own keys already)."""


async def _broken_keys(conn: AsyncConnection) -> set[tuple[object, ...]]:
    """(table, rowid, parent, fk id) of every row whose foreign key points at nothing."""
    result = await conn.exec_driver_sql("PRAGMA foreign_key_check")
    return {tuple(row) for row in result.fetchmany(MAX_BROKEN_KEYS)}


async def _refuse_new_broken_keys(conn: AsyncConnection, before: set[tuple[object, ...]]) -> None:
    new = sorted((await _broken_keys(conn)) - before, key=str)
    if new:
        table, rowid, parent = new[0][0], new[0][1], new[0][2]
        raise InvalidArgument(
            f"the change would leave row id {rowid} of table {table} pointing at no row of "
            f"{parent} (a foreign key); nothing was changed",
            hint="change or delete the referencing rows first",
        )


async def _begin(conn: AsyncConnection, *, readonly: bool, until: float) -> None:
    """``BEGIN`` (a read) or ``BEGIN IMMEDIATE`` (a write: the write lock first, so nothing
    has to upgrade a stale snapshot), retried a few times while another writer holds on, but
    not past ``until`` (the query time limit: each try may wait the busy timeout)."""
    if readonly:
        await conn.exec_driver_sql("PRAGMA query_only = ON")
        await conn.exec_driver_sql("BEGIN")
        return
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
            return
        except OperationalError as exc:
            await conn.rollback()
            late = time.monotonic() + 0.05 * attempt >= until
            if not is_locked(exc) or attempt == WRITE_ATTEMPTS or late:
                if is_locked(exc):
                    raise Unavailable(
                        "the app's database is busy with other writes", hint="retry in a moment"
                    ) from None
                raise
            await asyncio.sleep(0.05 * attempt)


def _open_confined(directory: Path, uid: int | None, deadline: _Deadline) -> sqlite3.Connection:
    """Open the app's database from this (the connection's own) thread, confined to the
    app's directory when the server may (root): see the module docstring."""
    if os.geteuid() == 0:
        _confine_thread(directory)
        path = f"/{FILE_NAME}"
    else:
        path = str(directory / FILE_NAME)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise sqlite3.OperationalError("the app's database is not a regular file")
        if uid is not None and (info.st_uid, info.st_gid) != (uid, uid):
            os.fchown(fd, uid, uid)
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    connection = sqlite3.connect(path, timeout=0, check_same_thread=False)  # pragma below
    try:
        for pragma in _PRAGMAS:
            try:
                connection.execute(pragma)
            except sqlite3.OperationalError as exc:
                # Turning the file to WAL needs it to itself: while the app holds it open in
                # rollback mode, go on in that mode (the next connection tries again).
                if not pragma.endswith("WAL") or exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                    raise
        _harden(connection)
        connection.set_progress_handler(deadline.passed, _PROGRESS_STEPS)
    except BaseException:
        connection.close()
        raise
    return connection


def _harden(connection: sqlite3.Connection) -> None:
    """The file's content is the app's (issue 19, finding 6): ``SQLITE_DBCONFIG_DEFENSIVE``
    (no ``writable_schema``, no shadow-table writes, no ``PRAGMA journal_mode=OFF``...) and
    a bound on every string, blob and row a statement makes (:data:`MAX_LENGTH`), so that
    no single step of the app's SQL (a check, a default, a generated column) can take
    gigabytes. Triggers are :mod:`.guard`'s."""
    setconfig = getattr(connection, "setconfig", None)  # Python 3.12 and later
    if setconfig is not None:
        setconfig(_DBCONFIG_DEFENSIVE, True)
    else:
        _defensive_by_handle(connection)
    connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
    connection.setlimit(sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, _TRIGGER_DEPTH)


def _defensive_by_handle(connection: sqlite3.Connection) -> None:
    """Python 3.11's sqlite3 has no ``setconfig``: call ``sqlite3_db_config`` on the
    connection's ``sqlite3 *``, the first field after the object header of CPython's
    ``pysqlite_Connection``. The handle is checked first (the file it has open must be
    ``app.db``) and the flag read back: anything unexpected refuses the connection."""
    lib = _sqlite_library()
    handle = ctypes.c_void_p.from_address(id(connection) + object.__basicsize__).value
    if not handle:
        raise sqlite3.OperationalError("no SQLite handle to make defensive")
    named = lib.sqlite3_db_filename(ctypes.c_void_p(handle), b"main")
    if named is None or os.path.basename(named.decode("utf-8", "replace")) != FILE_NAME:
        raise sqlite3.OperationalError("the SQLite handle is not this connection's")
    on = ctypes.c_int(-1)
    lib.sqlite3_db_config(
        ctypes.c_void_p(handle), _DBCONFIG_DEFENSIVE, ctypes.c_int(1), ctypes.byref(on)
    )
    if on.value != 1:
        raise sqlite3.OperationalError("SQLite refused SQLITE_DBCONFIG_DEFENSIVE")


_LIBRARY: list[ctypes.CDLL] = []


def _sqlite_library() -> ctypes.CDLL:
    """The SQLite library the ``sqlite3`` module uses (its ``_sqlite3`` extension's)."""
    if not _LIBRARY:
        extension = importlib.import_module("_sqlite3").__file__
        lib = ctypes.CDLL(extension)
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.sqlite3_db_config.restype = ctypes.c_int
        _LIBRARY.append(lib)
    return _LIBRARY[0]


def _confine_thread(directory: Path) -> None:
    """Give this thread a filesystem root of its own: ``directory``."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_FS) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_FS): {os.strerror(errno)}")
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchdir(fd)
    finally:
        os.close(fd)
    os.chroot(".")
    os.chdir("/")
