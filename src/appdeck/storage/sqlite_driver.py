"""aiosqlite under SQLAlchemy with one trip to SQLite's thread per statement.

aiosqlite runs each connection's ``sqlite3`` calls on a thread of its own: every call is a
put on that thread's queue (which wakes it, and hands it the GIL) and a
``call_soon_threadsafe`` back (which wakes the event loop). SQLAlchemy's adapter makes a
statement three or four such trips: open a cursor, execute, fetch the rows, close the
cursor. :class:`OneTripCursor` makes it one: the four calls run together on the thread, and
the rows, ``description``, ``rowcount`` and ``lastrowid`` come back at once (every
statement's rows were fetched whole before, too: SQLAlchemy's adapter buffers them). A warm
rollback's ten statements were ~48 trips, each a wake-up of both threads.

What changes nothing: the SQL, its parameters, the transactions (``commit`` and
``rollback`` are a trip each when SQLite has a transaction open; with none open they do
nothing, as ``sqlite3``'s own do nothing then, and make no trip), the errors (raised by
``sqlite3`` on the thread and translated by SQLAlchemy's adapter as before), and streamed
results (a server-side cursor is SQLAlchemy's own). :func:`dbapi` is passed to
``create_async_engine`` as its ``module``: only the platform's engine
(:func:`appdeck.storage.engine.create_engine`) uses it.

This leans on two names aiosqlite does not document, ``Connection._execute`` (run a function
on the connection's thread) and ``Connection._conn`` (its ``sqlite3`` connection);
SQLAlchemy's own adapter uses the same ones (its ``isolation_level`` setter).
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, cast

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_

_Outcome = tuple[Any, list[Any] | None, int, int | None]
"""What one statement left: ``description``, its rows (None when it returns none),
``rowcount``, ``lastrowid``."""


def _run(conn: sqlite3.Connection, operation: str, parameters: Any) -> _Outcome:
    """On the connection's thread: the whole statement, its cursor closed after."""
    cursor = conn.cursor()
    try:
        if parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else None
        return description, rows, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


def _run_many(conn: sqlite3.Connection, operation: str, seq_of_parameters: Any) -> _Outcome:
    cursor = conn.cursor()
    try:
        cursor.executemany(operation, seq_of_parameters)
        return None, None, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


class OneTripCursor:
    """A DB-API cursor for SQLAlchemy whose ``execute`` is one trip to SQLite's thread (see
    the module docs); its rows are held here, as SQLAlchemy's adapter holds them."""

    server_side = False
    arraysize = 1

    def __init__(self, adapted: AsyncAdapt_aiosqlite_connection) -> None:
        self._adapted = adapted
        self._rows: collections.deque[Any] = collections.deque()
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None

    def _trip(self, fn: Any, operation: str, parameters: Any) -> None:
        connection = cast(aiosqlite.Connection, self._adapted._connection)
        run: Any = connection._execute  # untyped in aiosqlite
        try:
            outcome: _Outcome = await_(run(fn, connection._conn, operation, parameters))
        except Exception as error:  # noqa: BLE001 - SQLAlchemy's adapter translates (and raises)
            self._adapted._handle_exception(error)
        self.description, rows, self.rowcount, self.lastrowid = outcome
        self._rows = collections.deque(rows) if rows is not None else collections.deque()

    def execute(self, operation: str, parameters: Any = None) -> None:
        self._trip(_run, operation, parameters)

    def executemany(self, operation: str, seq_of_parameters: Any) -> None:
        self._trip(_run_many, operation, seq_of_parameters)

    def setinputsizes(self, *inputsizes: Any) -> None:
        """Nothing to do (sqlite3's own does nothing either)."""

    def close(self) -> None:
        self._rows.clear()

    async def _async_soft_close(self) -> None:
        """SQLAlchemy's async result asks a buffered cursor to close early: nothing is open."""

    def __enter__(self) -> OneTripCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        while self._rows:
            yield self._rows.popleft()

    def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    def fetchmany(self, size: int | None = None) -> Sequence[Any]:
        rows = self._rows
        return [rows.popleft() for _ in range(min(size or self.arraysize, len(rows)))]

    def fetchall(self) -> Sequence[Any]:
        rows = list(self._rows)
        self._rows.clear()
        return rows


class _Connection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ()

    def cursor(self, server_side: bool = False) -> Any:
        if server_side:
            return super().cursor(server_side=True)
        return OneTripCursor(self)

    def _open_transaction(self) -> bool:
        """Whether SQLite has a transaction open on this connection (``sqlite3``'s
        ``in_transaction``: a flag read from the connection, no statement run). SQLAlchemy
        uses a connection from one task at a time, so none runs on its thread meanwhile."""
        inner: sqlite3.Connection | None = self._connection._connection
        return inner is None or inner.in_transaction

    def rollback(self) -> None:
        """No trip to SQLite's thread when no transaction is open: ``sqlite3``'s rollback
        does nothing then. Every connection given back to the pool is rolled back (a read's,
        one whose transaction was committed): one trip saved on each."""
        if self._open_transaction():
            super().rollback()

    def commit(self) -> None:
        """As :meth:`rollback`: ``sqlite3``'s commit does nothing without a transaction (a
        block that only read)."""
        if self._open_transaction():
            super().commit()


class _Dbapi(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *arg: Any, **kw: Any) -> _Connection:
        adapted = super().connect(*arg, **kw)
        return _Connection(self, adapted._connection)


def dbapi() -> Any:
    """The DB-API module for ``create_async_engine(..., module=dbapi())``."""
    return _Dbapi(aiosqlite, sqlite3)
