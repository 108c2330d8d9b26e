"""The local runtime driver: every release a workspace, every instance a supervised process
group on this machine.

Layout under ``runtime_dir``::

    apps/<app_id>/releases/<release_id>/
        src/              the workspace: a copy of the source, built in place (.venv, ...)
        release.json      the spec of the last start (0600: it holds the app's env), for adoption
        built.json        the spec of the last successful build (prepare is idempotent)
        instances.json    the instances that should be running: pid, pgid, port, start ticks
        build.log         JSON lines (+ .1 when rotated, + .seq: the lock and next seq)
        runtime.log       JSON lines written by the instances' shims and by this driver
        shim.stderr       the shims' own failures (normally empty)

An instance is ``python -I -S shim.py ... -- /bin/sh -c <run command>`` started in a new
session: the shim (see :mod:`appdeck.platform.runtime.shim`) leads the process group, owns
the app's stdout/stderr and writes them to ``runtime.log`` itself, so an instance needs
nothing from the server to keep running and logging.

Supervision: the driver waits for the shim to exit (``pidfd``, or polling ``/proc`` where
pidfds are unavailable) — the same way for instances it spawned and for adopted ones. An exit
not asked for by :meth:`stop` is a crash: the instance is restarted on the same port after a
backoff (0.5 s doubling to 10 s, reset after a long enough run); more than 5 crashes within
60 s mark the release unhealthy and the instance is given up.

Adoption: ``instances.json`` names each instance by pid *and* the start time from
``/proc/<pid>/stat`` (and the boot id), so a recycled pid is never mistaken for the instance.
:meth:`LocalDriver.adopt` supervises the instances still running and reports the others,
after stopping anything they left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from appdeck.common.errors import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from appdeck.platform.runtime import shim as shim_module
from appdeck.platform.runtime.driver import (
    RUNTIMES,
    Adoption,
    BuildFailed,
    Health,
    InstanceRef,
    LogKind,
    LogPage,
    ReleaseSpec,
)
from appdeck.platform.runtime.logs import last_seq, read_page, tail_text
from appdeck.platform.runtime.shim import (
    LOG_MAX_BYTES,
    LineSplitter,
    LogWriter,
    ProcStat,
    all_procs,
    boot_id,
    descendants,
    group_members,
    is_running,
    proc_stat,
    signal_quietly,
)
from appdeck.platform.runtime.workspace import CopyLimits, copy_source, remove_tree

log = logging.getLogger("appdeck.runtime")

SHIM_PATH: Final = Path(shim_module.__file__).resolve()
RELEASE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PASSED_ENV: Final = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
)
"""The only variables of the server's own environment an app or a build sees: locale, paths,
proxies and CA bundles; never the server's settings or secrets (``APPDECK_*``, ...)."""
BUILD_ENV_PREFIXES: Final = ("PIP_", "NPM_CONFIG_", "npm_config_")
"""Package-manager settings of the machine (indexes, mirrors, caches), for builds only."""
MAX_INDEX: Final = 999
LOG_TAIL_LINES: Final = 20
_POLL_S: Final = 0.05


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When a crashed instance is restarted, and when the release is declared unhealthy."""

    initial_backoff_s: float = 0.5
    max_backoff_s: float = 10.0
    crash_limit: int = 5
    """More crashes than this within ``window_s`` is a crash loop."""
    window_s: float = 60.0
    reset_after_s: float = 60.0
    """A run at least this long starts the backoff over."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(slots=True, eq=False)
class _Instance:
    index: int
    port: int
    pid: int | None = None
    start_ticks: int = 0
    started_at: float = 0.0
    own_child: bool = False
    pidfd: int | None = None
    stopping: bool = False
    supervisor: asyncio.Task[None] | None = None
    crashes: deque[float] = field(default_factory=deque)
    backoff_s: float = 0.0

    def ref(self, release_id: str) -> InstanceRef:
        return InstanceRef(release_id, self.index, self.port, self.pid or 0, self.started_at)

    def record(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "port": self.port,
            "pid": self.pid,
            "pgid": self.pid,
            "start_ticks": self.start_ticks,
            "started_at": self.started_at,
        }


@dataclass(slots=True, eq=False)
class _Release:
    release_id: str
    directory: Path
    spec: ReleaseSpec | None = None
    instances: dict[int, _Instance] = field(default_factory=dict)
    unhealthy: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    writer: LogWriter | None = None

    @property
    def workspace(self) -> Path:
        return self.directory / "src"

    def log(self, kind: LogKind) -> Path:
        return self.directory / f"{kind}.log"


class LocalDriver:
    """:class:`~appdeck.platform.runtime.driver.RuntimeDriver` on local processes."""

    def __init__(
        self,
        runtime_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        restart: RestartPolicy | None = None,
        log_max_bytes: int = LOG_MAX_BYTES,
        source_limits: CopyLimits | None = None,
        leftover_grace_s: float = 2.0,
    ) -> None:
        self.runtime_dir = Path(runtime_dir).resolve()
        self.clock = clock
        self.restart = restart or RestartPolicy()
        self.log_max_bytes = log_max_bytes
        self.source_limits = source_limits or CopyLimits()
        self.leftover_grace_s = leftover_grace_s
        self._releases: dict[str, _Release] = {}
        self._boot_id = boot_id()

    # ---------------------------------------------------------------- build

    async def prepare(self, spec: ReleaseSpec, *, rebuild: bool = False) -> None:
        _validate(spec)
        release = self._release(spec.release_id, create_for=spec)
        async with release.lock:
            built = release.directory / "built.json"
            if (
                not rebuild
                and release.workspace.is_dir()
                and _read_json(built) == _spec_to_json(spec)
            ):
                release.spec = spec
                return  # already built from this very spec (a release's source is frozen)
            if release.instances or self._recorded_alive(release):  # running or restarting
                raise Conflict(
                    f"release {spec.release_id} has running instances",
                    hint="stop them before building the release again",
                )
            built.unlink(missing_ok=True)
            release.spec = spec
            writer = LogWriter(release.log("build"), max_bytes=self.log_max_bytes, clock=self.clock)
            try:
                await self._prepare(release, spec, writer)
            finally:
                writer.close()
            _write_json(built, _spec_to_json(spec))

    async def _prepare(self, release: _Release, spec: ReleaseSpec, writer: LogWriter) -> None:
        writer.system(f"preparing release {spec.release_id} from {spec.source_path}")
        fresh = release.directory / "src.new"
        await asyncio.to_thread(remove_tree, fresh)
        try:
            stats = await asyncio.to_thread(
                copy_source,
                spec.source_path,
                fresh,
                limits=self.source_limits,
                exclude=self.runtime_dir,
            )
        except Exception as exc:
            await asyncio.to_thread(remove_tree, fresh)
            writer.system(f"copying the source failed: {exc}")
            raise
        await asyncio.to_thread(_swap_in, fresh, release.workspace)
        writer.system(f"copied {stats.files} entries ({stats.bytes} bytes) into the workspace")
        _write_json(release.directory / "release.json", _spec_to_json(spec))
        deadline = time.monotonic() + spec.build_timeout_s
        for step, argv in self._build_steps(spec, release.workspace, writer):
            await self._run_step(release, spec, step, argv, deadline, writer)
        writer.system("build succeeded")

    def _build_steps(
        self, spec: ReleaseSpec, workspace: Path, writer: LogWriter
    ) -> list[tuple[str, list[str]]]:
        steps: list[tuple[str, list[str]]] = []
        if spec.runtime == "python":
            venv = workspace / ".venv"
            if (workspace / "requirements.txt").is_file():
                steps.append(("venv", [sys.executable, "-m", "venv", str(venv)]))
                steps.append(
                    (
                        "pip install",
                        [
                            str(venv / "bin" / "python"),
                            "-m",
                            "pip",
                            "install",
                            "--disable-pip-version-check",
                            "--no-input",
                            "-r",
                            "requirements.txt",
                        ],
                    )
                )
            else:
                steps.append(("venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)]))
        elif spec.runtime == "node" and (workspace / "package.json").is_file():
            npm = shutil.which("npm")
            if npm is None:
                writer.system("package.json found but npm is not installed: skipping npm install")
            else:
                steps.append(("npm install", [npm, "install", "--no-audit", "--no-fund"]))
        if spec.build_command:
            steps.append(("build command", ["/bin/sh", "-c", spec.build_command]))
        return steps

    async def _run_step(
        self,
        release: _Release,
        spec: ReleaseSpec,
        step: str,
        argv: list[str],
        deadline: float,
        writer: LogWriter,
    ) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self._build_failed(release, spec, step, None, writer)
        writer.system(f"{step}: {' '.join(argv)}")
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=release.workspace,
            env=self._env(spec, release.workspace, port=None),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        assert process.stdout is not None
        assert process.stderr is not None
        readers = [
            asyncio.create_task(_pump(process.stdout, "stdout", writer)),
            asyncio.create_task(_pump(process.stderr, "stderr", writer)),
        ]
        timed_out = False
        try:
            async with asyncio.timeout(remaining):
                await process.wait()
        except TimeoutError:
            timed_out = True
        finally:
            # Whatever happened (success, timeout, cancellation), nothing the step started
            # outlives it: a build must not leave a daemon behind.
            _kill_tree(process.pid)
            await process.wait()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await asyncio.gather(*readers, return_exceptions=True)
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            transport = getattr(process, "_transport", None)
            if transport is not None:
                transport.close()  # pipes a stray daemon still holds open
        if timed_out:
            self._build_failed(release, spec, step, None, writer)
        if process.returncode != 0:
            self._build_failed(release, spec, step, process.returncode, writer)

    def _build_failed(
        self,
        release: _Release,
        spec: ReleaseSpec,
        step: str,
        exit_code: int | None,
        writer: LogWriter,
    ) -> None:
        if exit_code is None:
            message = f"{step} did not finish within {spec.build_timeout_s:g}s (build timeout)"
        else:
            message = f"{step} failed with exit code {exit_code}"
        writer.system(f"build failed: {message}")
        raise BuildFailed(
            f"build of release {spec.release_id} failed: {message}",
            release_id=spec.release_id,
            step=step,
            exit_code=exit_code,
            timed_out=exit_code is None,
            log_tail=tail_text(release.log("build"), LOG_TAIL_LINES),
        )

    # ---------------------------------------------------------------- run

    async def start(self, spec: ReleaseSpec, index: int, port: int) -> InstanceRef:
        _validate(spec)
        if not 0 <= index <= MAX_INDEX:
            raise InvalidArgument(f"instance index must be 0..{MAX_INDEX}, not {index}")
        if not 1 <= port <= 65535:
            raise InvalidArgument(f"port must be 1..65535, not {port}")
        release = self._existing(spec.release_id)
        if release is None or not release.workspace.is_dir():
            raise FailedPrecondition(
                f"release {spec.release_id} has no workspace",
                hint="prepare the release before starting it",
            )
        async with release.lock:
            if index in release.instances:
                raise Conflict(f"instance {index} of release {spec.release_id} is already running")
            if any(r["index"] == index for r in self._recorded_alive(release)):
                raise Conflict(
                    f"instance {index} of release {spec.release_id} runs unsupervised",
                    hint="adopt the release after a server restart, or stop it",
                )
            release.spec = spec
            if _read_json(release.directory / "release.json") != _spec_to_json(spec):
                # What restarts (and a later adoption) will run: the spec of the last start.
                _write_json(release.directory / "release.json", _spec_to_json(spec))
            instance = _Instance(index=index, port=port, backoff_s=self.restart.initial_backoff_s)
            release.instances[index] = instance
            try:
                self._spawn(release, instance)
            except BaseException:
                del release.instances[index]
                raise
            self._save_state(release)
            instance.supervisor = asyncio.create_task(self._supervise(release, instance))
            return instance.ref(release.release_id)

    def _spawn(self, release: _Release, instance: _Instance) -> None:
        """Start the shim of ``instance`` (in a new session) and remember who it is."""
        spec = release.spec
        assert spec is not None
        workspace = release.workspace
        argv = [
            sys.executable,
            "-I",
            "-S",
            str(SHIM_PATH),
            "--log",
            str(release.log("runtime")),
            "--instance",
            str(instance.index),
            "--max-bytes",
            str(self.log_max_bytes),
            "--grace",
            str(self.leftover_grace_s),
            "--cwd",
            str(workspace),
            "--",
            *self._run_argv(spec, workspace, instance.port),
        ]
        pid = os.posix_spawn(
            sys.executable,
            argv,
            self._env(spec, workspace, port=instance.port),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (
                    os.POSIX_SPAWN_OPEN,
                    2,
                    str(release.directory / "shim.stderr"),
                    os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                    0o600,
                ),
            ],
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            setsigmask=(),
        )
        stat = proc_stat(pid)
        instance.pid = pid
        instance.own_child = True
        instance.start_ticks = stat.start_ticks if stat else 0
        instance.started_at = self.clock()
        instance.pidfd = _pidfd(pid)

    def _run_argv(self, spec: ReleaseSpec, workspace: Path, port: int) -> list[str]:
        if spec.run_command:
            return ["/bin/sh", "-c", spec.run_command]
        if spec.runtime == "static":
            return [sys.executable, "-I", "-m", "http.server", str(port), "--bind", "127.0.0.1"]
        if spec.runtime == "python":
            for name in ("app.py", "main.py"):
                if (workspace / name).is_file():
                    return ["python", name]
        if spec.runtime == "node":
            package = workspace / "package.json"
            if package.is_file() and "start" in _package_scripts(package):
                return ["npm", "start"]
            for name in ("server.js", "index.js"):
                if (workspace / name).is_file():
                    return ["node", name]
        raise FailedPrecondition(
            f"release {spec.release_id} has no run command",
            hint="set run_command in the app spec",
        )

    def _env(self, spec: ReleaseSpec, workspace: Path, *, port: int | None) -> dict[str, str]:
        env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        if port is None:  # a build
            env.update(
                (name, value)
                for name, value in os.environ.items()
                if name.startswith(BUILD_ENV_PREFIXES)
            )
        env.setdefault("PATH", os.defpath)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(spec.env)
        for bin_dir in (workspace / ".venv" / "bin", workspace / "node_modules" / ".bin"):
            if bin_dir.is_dir():
                env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        if (workspace / ".venv").is_dir():
            env["VIRTUAL_ENV"] = str(workspace / ".venv")
        if port is not None:  # always the platform's, whatever the app's env says
            env["PORT"] = str(port)
            env["HOST"] = "127.0.0.1"
        return env

    async def _supervise(self, release: _Release, instance: _Instance) -> None:
        try:
            await self._supervision(release, instance)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "supervising instance %s of release %s failed", instance.index, release.release_id
            )
            self._writer(release).system(
                f"instance {instance.index} is no longer supervised (internal error)",
                instance=instance.index,
            )

    async def _supervision(self, release: _Release, instance: _Instance) -> None:
        """Restart ``instance`` whenever its process exits without being asked to."""
        writer = self._writer(release)
        policy = self.restart
        while True:
            pid, ticks = instance.pid, instance.start_ticks
            await self._wait_exit(instance)
            if pid is not None:
                # The shim stops the app's leftovers before it exits; if the shim itself was
                # killed, they are still there (holding the port): stop them.
                _kill_leftovers(pid, ticks, signal.SIGKILL)
            if instance.stopping:
                return
            now = self.clock()
            ran_for = now - instance.started_at
            if ran_for >= policy.reset_after_s:
                instance.backoff_s = policy.initial_backoff_s
            instance.crashes.append(now)
            while instance.crashes and instance.crashes[0] < now - policy.window_s:
                instance.crashes.popleft()
            crashes = len(instance.crashes)
            if crashes > policy.crash_limit:
                release.unhealthy = True
                release.instances.pop(instance.index, None)
                self._save_state(release)
                writer.system(
                    f"instance {instance.index} crashed {crashes} times within "
                    f"{policy.window_s:g}s: crash loop, not restarting; release marked unhealthy",
                    instance=instance.index,
                )
                return
            delay = instance.backoff_s
            instance.backoff_s = min(delay * 2, policy.max_backoff_s)
            writer.system(
                f"instance {instance.index} exited unexpectedly after {ran_for:.1f}s; "
                f"restarting in {delay:g}s (crash {crashes} within {policy.window_s:g}s)",
                instance=instance.index,
            )
            await asyncio.sleep(delay)
            if _stop_requested(instance):  # stop() may have run during the backoff
                return
            try:
                self._spawn(release, instance)
            except OSError as exc:
                writer.system(
                    f"instance {instance.index} could not be restarted: {exc}",
                    instance=instance.index,
                )
                instance.pid = None
                instance.started_at = self.clock()
                continue
            self._save_state(release)

    async def _wait_exit(self, instance: _Instance) -> None:
        """Return when the instance's process has exited (reaping it when it is our child)."""
        pid = instance.pid
        if pid is None:
            return
        try:
            if instance.pidfd is not None:
                loop = asyncio.get_running_loop()
                exited: asyncio.Future[None] = loop.create_future()

                def on_exit() -> None:
                    if not exited.done():
                        exited.set_result(None)

                loop.add_reader(instance.pidfd, on_exit)
                try:
                    await exited
                finally:
                    loop.remove_reader(instance.pidfd)
            else:
                while is_running(pid, instance.start_ticks):  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
        finally:
            if not is_running(pid, instance.start_ticks):
                self._forget_process(instance)

    def _forget_process(self, instance: _Instance) -> None:
        if instance.own_child and instance.pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(instance.pid, os.WNOHANG)
        if instance.pidfd is not None:
            os.close(instance.pidfd)
        instance.pidfd = None
        instance.pid = None
        instance.own_child = False

    # ---------------------------------------------------------------- stop

    async def stop(self, release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        release = self._existing(release_id)
        if release is None:
            return
        async with release.lock:
            await self._stop(release, index, grace_s)

    async def _stop(self, release: _Release, index: int | None, grace_s: float) -> None:
        targets = [
            inst for inst in release.instances.values() if index is None or inst.index == index
        ]
        # Recorded instances nobody supervises (a restarted server that did not adopt them).
        for record in self._recorded_alive(release):
            if (index is None or record["index"] == index) and record[
                "index"
            ] not in release.instances:
                targets.append(
                    _Instance(
                        index=record["index"],
                        port=record["port"],
                        pid=record["pid"],
                        start_ticks=record["start_ticks"],
                        started_at=record["started_at"],
                    )
                )
        writer = self._writer(release)
        await asyncio.gather(*(self._terminate(inst, grace_s, writer) for inst in targets))
        for inst in targets:
            release.instances.pop(inst.index, None)
        self._save_state(release)

    async def _terminate(self, instance: _Instance, grace_s: float, writer: LogWriter) -> None:
        instance.stopping = True
        if instance.supervisor is not None:
            instance.supervisor.cancel()
            await asyncio.gather(instance.supervisor, return_exceptions=True)
            instance.supervisor = None
        pid = instance.pid
        if pid is None or not is_running(pid, instance.start_ticks):
            if pid is not None:
                _kill_leftovers(pid, instance.start_ticks, signal.SIGKILL)
                self._forget_process(instance)
            return
        writer.system(f"stopping instance {instance.index} (pid {pid})", instance=instance.index)
        tree = _tree(pid)
        signal_quietly(pid, signal.SIGTERM, instance.start_ticks)  # the shim tells its group
        if not await _until_gone(pid, instance.start_ticks, tree, within=grace_s, owner=instance):
            writer.system(
                f"instance {instance.index} did not stop within {grace_s:g}s: killed",
                instance=instance.index,
            )
            tree |= _tree(pid)
            _kill_leftovers(pid, instance.start_ticks, signal.SIGKILL)
            for proc in tree.values():
                signal_quietly(proc.pid, signal.SIGKILL, proc.start_ticks)
            await _until_gone(pid, instance.start_ticks, tree, within=5.0, owner=instance)
        self._forget_process(instance)

    async def remove(self, release_id: str) -> None:
        release = self._existing(release_id)
        if release is None:
            return
        async with release.lock:
            await self._stop(release, None, 5.0)
            if release.writer is not None:
                release.writer.close()
            await asyncio.to_thread(remove_tree, release.directory)
            self._releases.pop(release_id, None)
            with contextlib.suppress(OSError):
                release.directory.parent.rmdir()  # releases/ of the app, when now empty
                release.directory.parent.parent.rmdir()

    async def detach(self) -> None:
        for release in list(self._releases.values()):
            for instance in release.instances.values():
                if instance.supervisor is not None:
                    instance.supervisor.cancel()
                    await asyncio.gather(instance.supervisor, return_exceptions=True)
                    instance.supervisor = None
                if instance.pidfd is not None:
                    os.close(instance.pidfd)
                    instance.pidfd = None
            if release.writer is not None:
                release.writer.close()
        self._releases.clear()

    # ---------------------------------------------------------------- observe

    async def health(
        self, ref: InstanceRef, *, path: str | None = None, timeout_s: float | None = None
    ) -> Health:
        release = self._releases.get(ref.release_id)
        spec = release.spec if release is not None else None
        path = path or (spec.health_path if spec else "/")
        timeout = timeout_s or (spec.health_timeout_s if spec else 5.0)
        _check_health_path(path)
        started = time.perf_counter()

        def elapsed() -> float:
            return round((time.perf_counter() - started) * 1000, 2)

        try:
            async with asyncio.timeout(timeout):
                status = await _http_status("127.0.0.1", ref.port, path)
        except TimeoutError:
            return Health(False, f"no answer within {timeout:g}s", None, elapsed())
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return Health(False, f"GET {path} failed: {reason}", None, elapsed())
        ok = 200 <= status < 400
        return Health(ok, f"GET {path} answered {status}", status, elapsed())

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage:
        log = self._log_path(release_id, kind)
        _check_log_args(cursor, limit, grep)
        return await asyncio.to_thread(read_page, log, cursor, limit, grep)

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage:
        log = self._log_path(release_id, kind)
        _check_log_args(cursor, limit, grep)
        position = last_seq(log) if cursor is None else cursor
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            page = await asyncio.to_thread(read_page, log, position, limit, grep)
            if page.lines or time.monotonic() >= deadline:
                return page
            position = page.next_cursor
            while last_seq(log) <= position and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.02)  # let the writer finish the line it numbered

    async def instances(self, release_id: str) -> list[InstanceRef]:
        release = self._releases.get(release_id)
        if release is None:
            return []
        return [
            inst.ref(release_id)
            for _, inst in sorted(release.instances.items())
            if inst.pid is not None
        ]

    async def unhealthy(self, release_id: str) -> bool:
        release = self._existing(release_id)
        return release is not None and release.unhealthy

    async def releases(self) -> list[str]:
        found = {path.name for path in self.runtime_dir.glob("apps/*/releases/*") if path.is_dir()}
        return sorted(found | set(self._releases))

    # ---------------------------------------------------------------- adopt

    async def adopt(self, release_id: str) -> Adoption:
        release = self._existing(release_id)
        if release is None:
            return Adoption(adopted=[], dead=[])  # nothing was ever started here
        async with release.lock:
            if release.spec is None:
                release.spec = _read_spec(release.directory / "release.json")
            writer = self._writer(release)
            adopted: list[InstanceRef] = []
            dead: list[InstanceRef] = []
            state = _read_json(release.directory / "instances.json")
            for record in _records(state):
                index = int(record["index"])
                if index in release.instances:
                    adopted.append(release.instances[index].ref(release_id))
                    continue
                instance = _Instance(
                    index=index,
                    port=int(record["port"]),
                    pid=int(record["pid"]),
                    start_ticks=int(record["start_ticks"]),
                    started_at=float(record["started_at"]),
                    backoff_s=self.restart.initial_backoff_s,
                )
                pid = int(record["pid"])
                if state.get("boot_id") == self._boot_id and is_running(pid, instance.start_ticks):
                    instance.pidfd = _pidfd(pid)
                    if instance.pidfd is not None and not is_running(pid, instance.start_ticks):
                        os.close(instance.pidfd)  # exited (and maybe reused) while we looked
                        instance.pidfd = None
                    else:
                        release.instances[index] = instance
                        instance.supervisor = asyncio.create_task(
                            self._supervise(release, instance)
                        )
                        writer.system(
                            f"instance {index} (pid {pid}) adopted after a restart",
                            instance=index,
                        )
                        adopted.append(instance.ref(release_id))
                        continue
                if state.get("boot_id") == self._boot_id:
                    _kill_leftovers(pid, instance.start_ticks, signal.SIGKILL)
                writer.system(
                    f"instance {index} (pid {pid}) was not running after a restart",
                    instance=index,
                )
                dead.append(instance.ref(release_id))
            self._save_state(release)
            return Adoption(adopted=adopted, dead=dead)

    # ---------------------------------------------------------------- bookkeeping

    def _release(self, release_id: str, *, create_for: ReleaseSpec) -> _Release:
        release = self._existing(release_id)
        if release is None:
            directory = self.runtime_dir / "apps" / str(create_for.app_id) / "releases" / release_id
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            release = _Release(release_id, directory)
            self._releases[release_id] = release
        return release

    def _existing(self, release_id: str) -> _Release | None:
        """The release, from memory or (after a restart) from its directory."""
        _check_release_id(release_id)
        release = self._releases.get(release_id)
        if release is not None:
            return release
        for directory in self.runtime_dir.glob(f"apps/*/releases/{release_id}"):
            if directory.is_dir():
                release = _Release(release_id, directory)
                state = _read_json(directory / "instances.json")
                release.unhealthy = bool(state.get("unhealthy", False))
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    release.spec = _read_spec(directory / "release.json")
                self._releases[release_id] = release
                return release
        return None

    def _log_path(self, release_id: str, kind: LogKind) -> Path:
        if kind not in ("build", "runtime"):
            raise InvalidArgument(f"log kind must be 'build' or 'runtime', not {kind!r}")
        release = self._existing(release_id)
        if release is None:
            raise NotFound(f"no release {release_id} on this runtime")
        return release.log(kind)

    def _writer(self, release: _Release) -> LogWriter:
        if release.writer is None:
            release.writer = LogWriter(
                release.log("runtime"), max_bytes=self.log_max_bytes, clock=self.clock
            )
        return release.writer

    def _recorded_alive(self, release: _Release) -> list[dict[str, Any]]:
        """Instances recorded on disk whose process still runs."""
        state = _read_json(release.directory / "instances.json")
        if state.get("boot_id") != self._boot_id:
            return []
        return [
            record
            for record in _records(state)
            if is_running(int(record["pid"]), int(record["start_ticks"]))
        ]

    def _save_state(self, release: _Release) -> None:
        running = [inst.record() for inst in release.instances.values() if inst.pid is not None]
        _write_json(
            release.directory / "instances.json",
            {
                "release_id": release.release_id,
                "boot_id": self._boot_id,
                "unhealthy": release.unhealthy,
                "instances": sorted(running, key=lambda record: int(record["index"])),
            },
        )


# -------------------------------------------------------------------- helpers


def _stop_requested(instance: _Instance) -> bool:
    return instance.stopping


def _validate(spec: ReleaseSpec) -> None:
    _check_release_id(spec.release_id)
    if spec.app_id < 0:
        raise InvalidArgument(f"app_id must not be negative, not {spec.app_id}")
    if spec.runtime not in RUNTIMES:
        raise InvalidArgument(f"runtime must be one of {', '.join(RUNTIMES)}, not {spec.runtime!r}")
    if spec.instances < 0:
        raise InvalidArgument("instances must not be negative")
    if spec.build_timeout_s <= 0 or spec.health_timeout_s <= 0:
        raise InvalidArgument("timeouts must be positive")
    _check_health_path(spec.health_path)
    for name, value in spec.env.items():
        if not ENV_NAME.fullmatch(name):
            raise InvalidArgument(f"invalid environment variable name {name!r}")
        if "\0" in value:
            raise InvalidArgument(f"environment variable {name} contains a NUL character")
    for command in (spec.build_command, spec.run_command):
        if command is not None and "\0" in command:
            raise InvalidArgument("commands must not contain NUL characters")


def _check_release_id(release_id: str) -> None:
    if not isinstance(release_id, str) or not RELEASE_ID.fullmatch(release_id):
        raise InvalidArgument(
            f"invalid release id {release_id!r}: letters, digits, '.', '_' and '-' only"
        )


def _check_health_path(path: str) -> None:
    if not path.startswith("/") or any(c.isspace() or ord(c) < 32 for c in path):
        raise InvalidArgument(f"health path must start with '/' and hold no spaces: {path!r}")


def _check_log_args(cursor: int | None, limit: int, grep: str | None) -> None:
    if cursor is not None and cursor < 0:
        raise InvalidArgument("cursor must not be negative")
    if not 1 <= limit <= 10_000:
        raise InvalidArgument("limit must be 1..10000")
    if grep is not None and len(grep) > 500:
        raise InvalidArgument("grep must be at most 500 characters")


def _spec_to_json(spec: ReleaseSpec) -> dict[str, Any]:
    data = asdict(spec)
    data["source_path"] = str(spec.source_path)
    return data


def _read_spec(path: Path) -> ReleaseSpec:
    data = _read_json(path)
    data["source_path"] = Path(data["source_path"])
    data["env"] = dict(data.get("env") or {})
    return ReleaseSpec(**data)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (a server killed mid-write leaves the old file), readable by us only."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _records(state: dict[str, Any]) -> list[dict[str, Any]]:
    records = state.get("instances")
    if not isinstance(records, list):
        return []
    valid = []
    for record in records:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            int(record["index"]), int(record["port"]), int(record["pid"])
            int(record["start_ticks"]), float(record["started_at"])
            valid.append(record)
    return valid


def _swap_in(fresh: Path, workspace: Path) -> None:
    old = workspace.with_name("src.old")
    remove_tree(old)
    if workspace.exists():
        workspace.rename(old)
    fresh.rename(workspace)
    remove_tree(old)


def _package_scripts(package: Path) -> dict[str, Any]:
    try:
        scripts = json.loads(package.read_text()).get("scripts")
    except (OSError, ValueError, AttributeError):
        return {}
    return scripts if isinstance(scripts, dict) else {}


def _pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (readable once it exits), or None where unsupported."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _tree(pid: int) -> dict[int, ProcStat]:
    """The process group led by ``pid`` and every descendant of ``pid``, by pid."""
    procs = all_procs()
    found = {proc.pid: proc for proc in group_members(pid, procs)}
    found.update((proc.pid, proc) for proc in descendants(pid, procs))
    return found


def _kill_leftovers(pgid: int, leader_ticks: int, signum: int) -> None:
    """Signal what is left of the process group ``pgid`` whose leader (started at
    ``leader_ticks``) is gone. The kernel does not reuse a pid while it names a live process
    group, so remaining members are ours; but when a process with that pid exists and is not
    the leader we knew, the pgid belongs to someone else now."""
    leader = proc_stat(pgid)
    if leader is not None and leader.start_ticks != leader_ticks:
        return
    for proc in group_members(pgid):
        signal_quietly(proc.pid, signum, proc.start_ticks)


async def _until_gone(
    pid: int,
    ticks: int,
    tree: dict[int, ProcStat],
    *,
    within: float,
    owner: _Instance,
) -> bool:
    """Wait until ``pid`` and every process of ``tree`` are gone; False on timeout."""
    deadline = time.monotonic() + within
    while True:
        if owner.own_child:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG: reaps, never waits
        alive = is_running(pid, ticks) or any(
            is_running(proc.pid, proc.start_ticks) for proc in tree.values()
        )
        if not alive:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)


def _kill_tree(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` and all descendants of ``pid``."""
    tree = _tree(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for proc in tree.values():
        signal_quietly(proc.pid, signal.SIGKILL, proc.start_ticks)


async def _pump(stream: asyncio.StreamReader, name: str, writer: LogWriter) -> None:
    splitter = LineSplitter()
    while chunk := await stream.read(65536):
        writer.write([(name, text) for text in splitter.feed(chunk)])
    writer.write([(name, text) for text in splitter.flush()])


async def _http_status(host: str, port: int, path: str) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: appdeck-health\r\n"
            "Accept: */*\r\nConnection: close\r\n\r\n".encode("ascii")
        )
        await writer.drain()
        status_line = await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ValueError("not an HTTP answer")
    return int(parts[1])
