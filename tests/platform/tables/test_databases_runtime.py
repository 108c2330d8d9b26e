"""The runtime driver gives each instance DATABASE_URL for its app's own database: the
platform's value, whatever the app's env says; sandboxed PostgreSQL instances keep their
front across a server restart (adoption)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from appdeck.model.release import Release
from appdeck.platform.tables.appdb_sqlite import SqliteFiles
from appdeck.platform.tables.databases import AppDatabases
from appdeck.runtime import LocalDriver, free_port, netns
from appdeck.runtime.model import Handle
from appdeck.runtime.sandbox import Sandbox, SandboxUnavailable, detect
from tests.runtime.conftest import (
    build_release,
    kill_everything_under,
    wait_healthy,
)
from tests.support.sandbox import CGROUP

NOTES = Path(__file__).resolve().parents[2] / "fixtures" / "apps" / "notes"
UID_BASE = 200_000


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    try:
        return detect(UID_BASE, CGROUP)
    except SandboxUnavailable as exc:
        pytest.fail(f"no sandbox on this host: {exc}")


def _release(app_id: int, python: str = "python3") -> Release:
    return build_release(
        app_id=app_id,
        app_name=f"notes{app_id}",
        release_id=f"{app_id}-1",
        source_path=NOTES,
        runtime="command",
        run_command=f"exec {python} app.py",
        env={"DATABASE_URL": "sqlite:////etc/passwd"},  # the app's own: never what it gets
        health_path="/healthz",
        health_timeout_s=2.0,
        build_timeout_s=30.0,
    )


@contextlib.asynccontextmanager
async def _driver(
    runtime_dir: Path, databases: AppDatabases, sandbox: Sandbox | None
) -> AsyncIterator[LocalDriver]:
    driver = LocalDriver(runtime_dir, sandbox=sandbox, databases=databases)
    try:
        yield driver
    finally:
        await driver.detach()


async def _get(driver: LocalDriver, ref: Handle, path: str) -> dict[str, Any]:
    """GET ``path`` from the instance (in its own network when sandboxed)."""
    async with asyncio.timeout(20):
        if ref.netns is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", ref.port)
        else:
            fd = driver.netns_fd(ref.netns)
            assert fd is not None
            sock = netns.socket_in(fd)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", ref.port))
            reader, writer = await asyncio.open_connection(sock=sock)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n".encode())
            raw = await reader.read()
        finally:
            writer.close()
    return dict(json.loads(raw.partition(b"\r\n\r\n")[2]))


async def test_an_unsandboxed_instance_gets_the_real_path_whatever_its_env_says(
    tmp_path: Path,
) -> None:
    files = SqliteFiles(tmp_path / "appdb")
    databases = AppDatabases(files)
    runtime_dir = tmp_path / "runtime"
    try:
        async with _driver(runtime_dir, databases, None) as driver:
            release = _release(5, python=sys.executable)
            await driver.prepare(release)
            ref = await driver.launch(release, 0, free_port())
            await wait_healthy(driver, ref)
            seen = await _get(driver, ref, "/env")
            assert seen["database_url"] == f"sqlite:///{files.directory(5)}/app.db"
            await driver.remove(release.release_id)
    finally:
        await databases.close()
        kill_everything_under(runtime_dir)


async def test_a_sandboxed_postgres_instance_keeps_its_front_across_a_server_restart(
    tmp_path: Path, pg_app_databases: AppDatabases, sandbox: Sandbox
) -> None:
    async with pg_app_databases.transaction(6) as conn:
        await conn.exec_driver_sql("CREATE TABLE notes (id bigint PRIMARY KEY, body text)")
        await conn.exec_driver_sql("INSERT INTO notes VALUES (1, 'kept')")
    runtime_dir = tmp_path / "runtime"
    release = _release(6)
    try:
        async with _driver(runtime_dir, pg_app_databases, sandbox) as first:
            await first.prepare(release)
            ref = await first.launch(release, 0, 8000)
            await wait_healthy(first, ref)
            seen = await _get(first, ref, "/env")
            assert seen["database_url"].startswith("postgresql://")
            assert "@127.0.0.1:5432/" in seen["database_url"]
            assert (await _get(first, ref, "/notes"))["rows"] == [[1, "kept"]]
        # the server is gone (its front with it); the instance runs on; the next one adopts
        async with _driver(runtime_dir, pg_app_databases, sandbox) as second:
            adoption = await second.take_over(release.release_id, release)
            assert [r.index for r in adoption.adopted] == [0]
            assert (await _get(second, adoption.adopted[0], "/notes"))["rows"] == [[1, "kept"]]
            await second.remove(release.release_id)
    finally:
        kill_everything_under(runtime_dir)
