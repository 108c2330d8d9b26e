"""Fixtures for the runtime driver tests: real processes on loopback, always cleaned up.

Every process a test starts has its working directory under the test's ``runtime_dir`` (the
shim and the app run in the workspace, builds too), so teardown can find and kill whatever a
failed test left behind, and tests can assert that nothing is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from appdeck.model.release import AppSpec, Release
from appdeck.runtime import (
    LocalDriver,
    RestartPolicy,
)
from appdeck.runtime.model import Handle

PYTHON = shlex.quote(sys.executable)
HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
FAST_RESTARTS = RestartPolicy(
    initial_backoff_s=0.05, max_backoff_s=0.2, crash_limit=5, window_s=60.0, reset_after_s=60.0
)


def processes_under(directory: Path) -> list[int]:
    """Pids of live processes whose working directory, or command line, is inside
    ``directory``."""
    root = str(directory.resolve())
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            cwd = ""
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read().decode(errors="replace")
        except OSError:
            cmdline = ""
        if cwd == root or cwd.startswith(root + "/") or root in cmdline:
            found.append(int(name))
    return found


def kill_everything_under(directory: Path) -> None:
    """SIGKILL every process :func:`processes_under` finds, and reap our own children."""
    for _ in range(5):
        pids = processes_under(directory)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def is_alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "runtime"
    directory.mkdir()
    try:
        yield directory
    finally:
        kill_everything_under(directory)


@pytest.fixture
async def driver(runtime_dir: Path) -> AsyncIterator[LocalDriver]:
    runtime = LocalDriver(runtime_dir, restart=FAST_RESTARTS, leftover_grace_s=1.0)
    try:
        yield runtime
    finally:
        for release_id in await runtime.releases():
            with contextlib.suppress(Exception):
                await runtime.stop(release_id, grace_s=1.0)
        await runtime.detach()
        kill_everything_under(runtime_dir)


def build_release(
    *,
    app_id: int,
    app_name: str = "hello",
    source_path: Path = HELLO,
    release_id: str | None = None,
    env: dict[str, str] | None = None,
    **spec: Any,
) -> Release:
    """A :class:`Release` from the flat fields tests like to write: ``release_id`` ("12-3"),
    ``health_path``/``health_timeout_s``, ``memory_mb``/``cpus``/``pids``/``disk_mb``, ``outbound`` and
    any top-level spec field."""
    number = 1
    if release_id is not None:
        app, _, rest = release_id.partition("-")
        app_id, number = int(app), int(rest)
    fields: dict[str, Any] = {}
    health: dict[str, Any] = {}
    resources: dict[str, Any] = {}
    for name, value in spec.items():
        if name == "health_path":
            health["path"] = value
        elif name == "health_timeout_s":
            health["timeout_s"] = value
        elif name in ("memory_mb", "cpus", "pids", "disk_mb"):
            resources[name] = value
        elif name == "outbound":
            fields["network"] = {"outbound": value}
        else:
            fields[name] = value
    if health:
        fields["health_check"] = health
    if resources:
        fields["resources"] = resources
    return Release(
        app_id,
        app_name,
        number,
        AppSpec.from_dict(fields),
        env or {},
        route=f"{app_name}--test",
        source_path=Path(source_path),
    )


def make_spec(source: Path = HELLO, **overrides: Any) -> Release:
    fields: dict[str, Any] = {
        "app_id": 12,
        "app_name": "hello",
        "release_id": "12-1",
        "source_path": source,
        "runtime": "command",
        "run_command": f"exec {PYTHON} app.py",
        "env": {"GREETING": "hi"},
        "health_path": "/healthz",
        "health_timeout_s": 1.0,
        "build_timeout_s": 300.0,  # a bound only: pip took over 30 s at load 14 (issue 20)
    }
    fields.update(overrides)
    return build_release(**fields)


async def eventually(
    check: Callable[[], Awaitable[bool] | bool], *, within: float = 30.0, interval: float = 0.05
) -> None:
    """Call (and await) ``check`` until it is true; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await asyncio.sleep(interval)


async def wait_healthy(runtime: LocalDriver, ref: Handle, within: float = 10.0) -> None:
    async def healthy() -> bool:
        return (await runtime.check(ref)).ok

    await eventually(healthy, within=within)


async def http_get(port: int, path: str = "/") -> tuple[int, bytes]:
    """A minimal HTTP/1.1 GET on 127.0.0.1 (status, body), bounded by 30 s."""
    async with asyncio.timeout(30.0):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body
