"""A real ``appdeck serve`` process for end-to-end tests: start it, read its URL, stop it.

The server requires bearer tokens, so it is started with ``--dev`` and the dev access token it
prints is kept: :attr:`AppDeckProcess.auth_headers`.

Every wait here is bounded. The process writes stdout and stderr to files in a log directory
(not pipes, so it can never block on a full pipe); the stderr tail goes into any error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from appdeck.ingress.haproxy.namespaces import Namespaces
from tests.support.templates import copy_into
from tests.support.zygote import ForkedProcess, run, zygote

ROOT = Path(__file__).resolve().parents[2]
URL_LINE = re.compile(r"MCP server listening on (https?://\S+/mcp)\s*$", re.MULTILINE)
LOCAL_LINE = re.compile(r"This process listens on (http://\S+/mcp)\s*$", re.MULTILINE)
"""Printed after the URL line when a public URL is set (the proxy's): the process itself."""
DEV_TOKEN = re.compile(r"^Dev access token[^\n]*:\n(\S+)\n", re.MULTILINE)


def _log_files(log_dir: Path, name: str) -> tuple[Path, Path]:
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir / f"{name}.stdout", log_dir / f"{name}.stderr"


def serve_command(data_dir: Path, *, dev: bool = True, ingress_port: int = 0) -> list[str]:
    command = [
        str(appdeck_executable()),
        "serve",
        "--port",
        "0",
        "--data-dir",
        str(data_dir),
        "--with-conformance-fixtures",
        "--ingress-port",
        str(ingress_port),
    ]
    return [*command, "--dev"] if dev else command


def clean_env() -> dict[str, str]:
    """The test runner's environment minus any APPDECK_* setting that would leak into the
    server (a developer's database URL, ports, ...)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("APPDECK_") and k != "APP_VERSION"
    }
    env["PYTHONUNBUFFERED"] = "1"
    env["APPDECK_SANDBOX"] = "on"  # --dev alone would fall back to unsandboxed apps
    env["APPDECK_TEST_FAST_PASSWORD_HASHES"] = "1"  # the dev user's password: ~0.2 s a start
    return env


def run_appdeck(
    *args: str, env: dict[str, str], input: str | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``appdeck ARGS`` (what an operator types beside a running server), its output
    captured: a fork of the worker's zygote (:func:`tests.support.zygote.run`), ``env`` on
    top of :func:`clean_env`. The CLI's own tests exec the command instead."""
    return run(
        [str(appdeck_executable()), *args],
        env=clean_env() | env,
        input=input,
        timeout=timeout,
    )


def appdeck_executable() -> Path:
    """The project's ``appdeck`` script: the venv's, else the one next to this interpreter."""
    for candidate in (
        ROOT / ".venv" / "bin" / "appdeck",
        Path(sys.executable).with_name("appdeck"),
    ):
        if candidate.exists():
            return candidate
    raise FileNotFoundError("no appdeck executable: install the project into .venv")


@dataclass
class AppDeckProcess:
    process: asyncio.subprocess.Process | ForkedProcess
    url: str
    data_dir: Path
    stdout_path: Path
    stderr_path: Path
    token: str | None = None

    @property
    def auth_headers(self) -> dict[str, str]:
        """``Authorization`` for every request, when the server wants a token."""
        return {"authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT`` (the URL without ``/mcp``)."""
        return self.url.removesuffix("/mcp")

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.stderr_path, lines)

    def notable(self, lines: int = 60) -> str:
        """The last ``lines`` lines of its stderr above info, tracebacks included."""
        return notable_lines(self.stderr_path, lines)

    async def kill(self, within: float = 10.0) -> int:
        """SIGKILL (a crash) and reap the process."""
        if self.running:
            self.process.kill()
        async with asyncio.timeout(within):
            return await self.process.wait()

    async def stop(self, grace: float = 8.0, within: float = 10.0) -> int:
        """SIGTERM; SIGKILL when it has not exited after ``grace`` seconds."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    return await self.process.wait()
            except TimeoutError:
                pass
        return await self.kill(within)


async def start_appdeck(
    data_dir: Path,
    *,
    log_dir: Path,
    dev: bool = True,
    name: str = "appdeck",
    within: float = 90.0,  # a bound for a loaded 2-core machine, not a speed
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    ingress_port: int = 0,
    fresh_process: bool = False,
) -> AppDeckProcess:
    """Run ``appdeck serve --port 0 --data-dir DATA_DIR --with-conformance-fixtures [--dev]``
    and wait (at most ``within`` seconds) for the line that gives its URL (and, with
    ``dev``, for the dev token). On SQLite (no ``APPDECK_DATABASE_URL`` in ``env``) an empty
    data directory first gets a copy of the migrated template (:mod:`tests.support.templates`):
    the server then does not migrate from zero (the tests of a fresh install run their own
    processes). The process is a fork of the worker's zygote (:mod:`tests.support.zygote`:
    the program's imports made once), or with ``fresh_process`` the command exec'd anew."""
    if "APPDECK_DATABASE_URL" not in (env or {}):
        copy_into(data_dir if cwd is None else cwd / data_dir)
    stdout_path, stderr_path = _log_files(log_dir, name)
    command, environment = serve_command(data_dir, dev=dev, ingress_port=ingress_port), clean_env()
    process: asyncio.subprocess.Process | ForkedProcess
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        if fresh_process:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=environment | (env or {}),
                cwd=cwd,  # a relative data dir is relative to it
                start_new_session=True,  # a Ctrl-C on pytest is not also delivered to it
            )
        else:
            process = zygote(environment).spawn(
                command,
                env=environment | (env or {}),
                cwd=cwd,
                stdin=None,
                stdout=out.fileno(),
                stderr=err.fileno(),
                session=True,
            )
    server = AppDeckProcess(process, "", data_dir, stdout_path, stderr_path)
    try:
        async with asyncio.timeout(within):
            while True:
                printed = stdout_path.read_text(errors="replace")
                found = URL_LINE.search(printed)
                token = DEV_TOKEN.search(printed)
                local = LOCAL_LINE.search(printed)
                if found and (token or not dev):
                    server.url = local.group(1) if local else found.group(1)
                    server.token = token.group(1) if token else None
                    return server
                if not server.running:
                    raise RuntimeError(
                        f"appdeck serve exited with {process.returncode} before printing its URL:\n"
                        + server.log_tail()
                    )
                await asyncio.sleep(0.05)
    except BaseException as exc:
        await server.kill()
        if isinstance(exc, TimeoutError):
            raise RuntimeError(
                f"appdeck serve printed no URL{' and token' if dev else ''} within "
                f"{within:.0f} s:\n" + server.log_tail()
            ) from None
        raise


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_ROUTINE = re.compile(r"^\S+Z \[(info|debug)\s*\]")
_ENTRY = re.compile(r"^\S+Z \[")


def notable_lines(path: Path, limit: int) -> str:
    """The last ``limit`` lines of a server's stderr above info (warnings, errors) with their
    tracebacks: what a failed test's report needs, without the request log around them."""
    kept: list[str] = []
    keeping = False
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    for line in text.splitlines():
        if _ENTRY.match(line):
            keeping = _ROUTINE.match(line) is None
        if keeping:
            kept.append(line)
    return "\n".join(kept[-limit:]) or "(nothing above info)"


def reap_haproxy(under: Path) -> None:
    """Stop the HAProxy data planes (issue 21) of the installs whose data dirs are under
    ``under`` (up to three levels down): they outlive ``appdeck serve`` by design, in
    ``/run/appdeck/<install>/haproxy``."""
    ids = set()
    for pattern in ("install.json", "*/install.json", "*/*/install.json", "*/*/*/install.json"):
        for record in under.glob(pattern):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                ids.add(json.loads(record.read_text()).get("id"))
    ids = {i for i in ids if isinstance(i, str) and i}
    for install in ids:  # the names its instances' namespaces had for HAProxy
        Namespaces(install, lambda key: None).clear()
    marks = [f"/{i}/haproxy/".encode() for i in ids]
    if not marks:
        return
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if b"haproxy" in cmdline and any(mark in cmdline for mark in marks):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue
