"""The apps' SQLite files: the app's uid owns them, and what the app plants in its own
directory (links to the platform's database, FIFOs) never takes the platform anywhere else."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.exc import DBAPIError

from appdeck.platform.tables.appdb_sqlite import SqliteFiles, _confine_thread
from appdeck.platform.tables.databases import AppDatabases

UID_BASE = 200_000


@pytest.fixture
async def files(tmp_path: Path) -> AsyncIterator[SqliteFiles]:
    backend = SqliteFiles(tmp_path / "appdb", uid_for=lambda app_id: UID_BASE + app_id)
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
def platform_db(tmp_path: Path) -> Path:
    """A stand-in for the platform's own database, beside the apps' directories."""
    path = tmp_path / "appdeck.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE tokens (secret TEXT)")
        conn.execute("INSERT INTO tokens VALUES ('platform-secret')")
    conn.close()
    return path


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _exists(path: Path) -> bool:
    return path.exists()


async def _emptied(files: SqliteFiles) -> tuple[AppDatabases, Path]:
    """App 1's database made, closed, and its files removed (for the app to plant things)."""
    databases = AppDatabases(files)
    await _tables(databases, 1)
    await files.close()
    directory = files.directory(1)
    for name in ("app.db", "app.db-wal", "app.db-shm"):
        (directory / name).unlink(missing_ok=True)
    return databases, directory


async def _tables(databases: AppDatabases, app_id: int) -> list[str]:
    async with databases.transaction(app_id) as conn:
        result = await conn.exec_driver_sql("SELECT name FROM sqlite_master ORDER BY name")
        return [row[0] for row in result]


async def test_the_apps_directory_and_files_are_its_uids_and_private(
    files: SqliteFiles,
) -> None:
    databases = AppDatabases(files)
    async with databases.transaction(3) as conn:
        await conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    directory = files.directory(3)
    info = os.stat(directory)
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (UID_BASE + 3,) * 2 + (0o700,)
    for name in ("app.db", "app.db-wal", "app.db-shm"):
        info = os.stat(directory / name)
        assert (info.st_uid, info.st_gid) == (UID_BASE + 3, UID_BASE + 3), name
        assert stat.S_IMODE(info.st_mode) & 0o077 == 0, name


async def test_a_link_the_app_puts_in_place_of_its_database_is_not_followed(
    files: SqliteFiles, platform_db: Path
) -> None:
    databases, directory = await _emptied(files)
    (directory / "app.db").symlink_to(platform_db)
    with pytest.raises((DBAPIError, OSError)):
        await _tables(databases, 1)
    assert _read(platform_db).count(b"platform-secret") == 1
    assert not _exists(Path(f"{platform_db}-wal"))


def _workers() -> set[threading.Thread]:
    return {
        thread
        for thread in threading.enumerate()
        if "_connection_worker_thread" in thread.name and thread.is_alive()
    }


async def test_a_refused_open_leaves_no_worker_thread_behind(
    files: SqliteFiles, platform_db: Path
) -> None:
    databases, directory = await _emptied(files)
    before = _workers()
    (directory / "app.db").symlink_to(platform_db)
    with pytest.raises((DBAPIError, OSError)):
        await _tables(databases, 1)
    assert _workers() <= before


async def test_a_link_in_place_of_the_journal_leaves_the_platforms_file_untouched(
    files: SqliteFiles, platform_db: Path
) -> None:
    databases = AppDatabases(files)
    await _tables(databases, 1)
    await files.close()
    directory = files.directory(1)
    (directory / "app.db-wal").unlink(missing_ok=True)
    (directory / "app.db-wal").symlink_to(platform_db)  # SQLite opens journals O_NOFOLLOW
    before = _read(platform_db)
    try:
        async with databases.transaction(1) as conn:
            await conn.exec_driver_sql("CREATE TABLE t (x)")
            await conn.exec_driver_sql("INSERT INTO t VALUES (zeroblob(100000))")
    except DBAPIError:
        pass  # refused is fine too: what matters is that the platform's file is untouched
    assert _read(platform_db) == before


async def test_a_fifo_in_place_of_the_database_is_refused_without_hanging(
    files: SqliteFiles,
) -> None:
    databases, directory = await _emptied(files)
    os.mkfifo(directory / "app.db")
    with pytest.raises((DBAPIError, sqlite3.OperationalError)):
        await _tables(databases, 1)


async def test_engines_are_kept_in_a_bounded_lru(tmp_path: Path) -> None:
    files = SqliteFiles(tmp_path / "appdb", max_engines=2)
    databases = AppDatabases(files)
    try:
        for app_id in (1, 2, 3, 1):
            await _tables(databases, app_id)
        assert files._engines.apps == [3, 1]
    finally:
        await files.close()


async def test_a_grant_names_the_file_inside_the_sandbox_or_on_the_host(
    files: SqliteFiles,
) -> None:
    sandboxed = await AppDatabases(files).grant(4, sandboxed=True)
    assert sandboxed.env == {"DATABASE_URL": "sqlite:////data/app.db"}
    assert sandboxed.bind == files.directory(4)
    trusted = await AppDatabases(files).grant(4, sandboxed=False)
    assert trusted.env == {"DATABASE_URL": f"sqlite:///{files.directory(4)}/app.db"}
    assert trusted.bind is None


def test_a_connection_thread_sees_nothing_but_the_apps_directory(
    tmp_path: Path, platform_db: Path
) -> None:
    """What closes the race between the O_NOFOLLOW check of app.db and SQLite's own open (which
    resolves links in the main file's path): the thread is rooted in the app's directory."""
    directory = tmp_path / "appdb" / "1"
    directory.mkdir(parents=True)
    (directory / "app.db").symlink_to(platform_db)
    seen: dict[str, object] = {}

    def confined() -> None:
        _confine_thread(directory)
        seen["listing"] = sorted(os.listdir("/"))
        seen["platform visible"] = os.path.exists(platform_db)
        try:
            with sqlite3.connect("/app.db") as conn:
                seen["tables"] = conn.execute("SELECT name FROM sqlite_master").fetchall()
            conn.close()
        except sqlite3.Error as exc:
            seen["error"] = str(exc)

    thread = threading.Thread(target=confined)
    thread.start()
    thread.join(timeout=10)
    assert seen["listing"] == ["app.db"]
    assert seen["platform visible"] is False
    assert "tables" not in seen
    assert "unable to open" in str(seen["error"])
    assert os.path.exists(platform_db)  # the rest of the process kept its root


async def test_the_platform_reads_while_the_app_holds_its_file_in_rollback_mode(
    files: SqliteFiles,
) -> None:
    """The app made its database first (Python's default: rollback journal) and is in the
    middle of a read: the platform cannot turn the file to WAL now, and reads anyway."""
    directory = files.directory(1)
    directory.mkdir(parents=True)
    app = sqlite3.connect(directory / "app.db", isolation_level=None)
    try:
        app.execute("CREATE TABLE notes (body TEXT)")
        app.execute("INSERT INTO notes VALUES ('from the app')")
        app.execute("BEGIN")
        assert app.execute("SELECT count(*) FROM notes").fetchone() == (1,)  # a shared lock
        databases = AppDatabases(files)
        async with databases.transaction(1, readonly=True) as conn:
            rows = (await conn.exec_driver_sql("SELECT body FROM notes")).all()
        assert [tuple(row) for row in rows] == [("from the app",)]
        app.execute("COMMIT")
    finally:
        app.close()
