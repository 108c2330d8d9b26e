"""End-to-end fixtures: a real ``appdeck serve`` process per test (see tests/support)."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from pathlib import Path

import pytest

from tests.support.appdeck_process import AppDeckProcess, reap_haproxy, start_appdeck
from tests.support.replicas import Replicas

FAILED_LOG_LINES = 200
"""Lines of each server's stderr attached to a failed test's report: the servers run as
processes, so what they logged is otherwise lost with the test's temporary directory."""
NOTABLE_LOG_LINES = 60
"""Of a replica's stderr, the last lines above info (a replica set logs every request)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when in ("setup", "call"):
        for name, value in getattr(item, "funcargs", {}).items():
            replicas = getattr(value, "replicas", value)  # a fixture that holds a set
            if isinstance(replicas, Replicas):
                report.sections.append((f"replicas of {name}", replicas.report(NOTABLE_LOG_LINES)))
            elif isinstance(value, AppDeckProcess):
                tail = value.log_tail(FAILED_LOG_LINES)
                report.sections.append((f"server {name} stderr", tail))
    return report


Launcher = Callable[..., Awaitable[AppDeckProcess]]


@pytest.fixture
async def launch_appdeck(tmp_path: Path) -> AsyncIterator[Launcher]:
    """Starts servers on demand (``await launch_appdeck(data_dir=None)``); stops every one it
    started at teardown (SIGTERM, then SIGKILL after a bound)."""
    started: list[AppDeckProcess] = []

    async def launch(
        data_dir: Path | None = None, env: dict[str, str] | None = None
    ) -> AppDeckProcess:
        server = await start_appdeck(
            data_dir or tmp_path / "data",
            log_dir=tmp_path / "logs",
            env=env,
            name=f"appdeck{len(started)}",
        )
        started.append(server)
        return server

    yield launch
    for server in reversed(started):
        await server.stop()
    reap_apps(tmp_path)


def reap_apps(under: Path) -> None:
    """Kill app processes a test left running (the server keeps apps alive across its own
    restarts, by design): every process group whose command line names ``under``."""
    reap_haproxy(under)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if str(under) in cmdline and "shim" in cmdline:
                os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


@pytest.fixture
async def appdeck(launch_appdeck: Launcher) -> AppDeckProcess:
    """One running server with the conformance fixtures, on a fresh data directory; its
    ``url`` and the ``auth_headers`` every request needs."""
    return await launch_appdeck()


@pytest.fixture
def server_url(appdeck: AppDeckProcess) -> str:
    """``http://127.0.0.1:PORT/mcp`` of a running server (see ``appdeck`` for its token)."""
    return appdeck.url
