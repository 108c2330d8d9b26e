"""Builds of the local driver: copy a release's source into a fresh workspace, then run its
build steps (a venv and ``pip install``, ``npm install``, the build command) with a deadline,
logging their output to ``build.log``.

A release is built once per spec (``built.json``); no step outlives the build: whatever a
step started is killed when it ends, succeeds or times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Final

from appdeck.common.errors import AppDeckError, Conflict, InvalidArgument, QuotaExceeded
from appdeck.common.spawn import spawn
from appdeck.runtime import netns
from appdeck.runtime import workspace as workspace_module
from appdeck.runtime.cgroups import Limits
from appdeck.runtime.core import DriverCore
from appdeck.runtime.driver import BuildFailed, Release
from appdeck.runtime.logfile import LineSplitter, LogWriter
from appdeck.runtime.logs import tail_text
from appdeck.runtime.model import ReleaseState, validate
from appdeck.runtime.procs import kill_and_reap
from appdeck.runtime.sandbox import APP_DIR, NoSandboxUid, env_fd, root_env
from appdeck.runtime.state import read_json, write_json
from appdeck.runtime.workspace import (
    CopyStats,
    copy_source,
    open_dir_nofollow,
    remove_tree,
)

LOG_TAIL_LINES: Final = 20
COPY_TIMEOUT_S: Final = 300.0
_COPY_CODE: Final = (
    Path(workspace_module.__file__).read_text()
    + "\nimport sys\nraise SystemExit(main(sys.argv[1:]))\n"
)
"""The sandboxed copy: :mod:`.workspace` run as a script (it is stdlib-only)."""


class BuildMixin(DriverCore):
    """``prepare``: build a release's workspace."""

    # ---------------------------------------------------------------- build

    async def prepare(self, release: Release, *, rebuild: bool = False) -> None:
        validate(release)
        if self.sandbox is not None:  # an app id past its install's uids: said plainly
            try:
                self.sandbox.uid_for(release.app_id)
            except NoSandboxUid as exc:
                raise BuildFailed(exc.message, release_id=release.release_id) from None
        note = await self._ensure_disk(release)
        state = self._release(release.release_id, create_for=release)
        async with state.lock:
            built = state.directory / "built.json"
            if (
                not rebuild
                and state.workspace.is_dir()
                and read_json(built) == self._record(release)
            ):
                state.release = release
                return  # already built from this very spec (a release's source is frozen)
            if state.instances or self._recorded_alive(state):  # running or restarting
                raise Conflict(
                    f"release {release.release_id} has running instances",
                    hint="stop them before building the release again",
                )
            built.unlink(missing_ok=True)
            state.release = release
            writer = LogWriter(state.log("build"), max_bytes=self.log_max_bytes, clock=self.clock)
            if note is not None:
                writer.system(note)
            try:
                await self._prepare(state, release, writer)
            finally:
                writer.close()
            write_json(built, self._record(release))

    async def _ensure_disk(self, release: Release) -> str | None:
        """The app's disk, mounted and sized for this release (:mod:`.disks`); a line for the
        build log when its size could not follow the spec."""
        if self.disks is None:
            return None
        idle = self._app_idle(release.app_id)
        return await asyncio.to_thread(
            self.disks.ensure, release.app_id, self._disk_mb(release), migrate=idle
        )

    async def _prepare(self, state: ReleaseState, release: Release, writer: LogWriter) -> None:
        writer.system(f"preparing release {release.release_id}")  # never a server path
        fresh = state.workspace.with_name("src.new")
        fresh.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        await asyncio.to_thread(remove_tree, fresh)
        try:
            if self.sandbox is None:
                stats = await asyncio.to_thread(
                    copy_source,
                    release.source_path,
                    fresh,
                    limits=self.source_limits,
                    exclude=self.runtime_dir,
                )
            else:
                stats = await self._sandboxed_copy(release, fresh)
        except Exception as exc:
            await asyncio.to_thread(remove_tree, fresh)
            said = exc.message if isinstance(exc, AppDeckError) else "the copy broke off"
            writer.system(f"copying the source failed: {said}")  # an OSError names server paths
            raise
        await asyncio.to_thread(_swap_in, fresh, state.workspace)
        writer.system(f"copied {stats.files} entries ({stats.bytes} bytes) into the workspace")
        write_json(state.directory / "release.json", self._record(release))
        if stats.venv:
            writer.system(f"venv: python3 -m venv --without-pip {APP_DIR}/.venv (with the copy)")
        steps = self._build_steps(release, state.workspace, writer, venv_made=stats.venv)
        if steps:
            await self._run_steps(state, release, steps, writer)
        writer.system("build succeeded")

    async def _run_steps(
        self,
        state: ReleaseState,
        release: Release,
        steps: list[tuple[str, list[str]]],
        writer: LogWriter,
    ) -> None:
        """Run the build's steps in turn, by one deadline (sandboxed: in one network and one
        cgroup made for them)."""
        deadline = time.monotonic() + release.spec.build_timeout_s
        space = None
        key = f"{release.release_id}.build"
        procs: tuple[Path, ...] = ()
        if self.sandbox is not None:  # one network for the build's steps, with a way out
            space = netns.new_loopback_only()
            if self.egress is not None:
                self.egress.listen(key, space)
            if self.sandbox.cgroups is not None:
                procs = self.sandbox.cgroups.create(key, build_limits(release)).procs
        try:
            for step, argv in steps:
                await self._run_step(state, release, step, argv, deadline, writer, space, procs)
        finally:
            if space is not None:
                if self.egress is not None:
                    await self.egress.stop(key)
                os.close(space)
            if procs and self.sandbox is not None and self.sandbox.cgroups is not None:
                await asyncio.to_thread(self.sandbox.cgroups.remove, key)

    async def _sandboxed_copy(self, release: Release, fresh: Path) -> CopyStats:
        """Copy the source inside the app's sandbox, as the app's uid (see :mod:`.workspace`):
        the source directory is opened here without following any link (so one swapped in
        after the platform checked the path is refused), and handed over as that descriptor."""
        assert self.sandbox is not None
        uid = self.sandbox.uid_for(release.app_id)
        os.mkdir(fresh, mode=0o700)
        os.chown(fresh, uid, uid)
        source_fd = open_dir_nofollow(release.source_path)
        copy_limits = (str(self.source_limits.max_bytes), str(self.source_limits.max_files))
        venv = [f"{APP_DIR}/.venv"] if release.spec.runtime == "python" else []
        argv = self.sandbox.wrap(
            ["python3", "-I", "-S", "-c", _COPY_CODE, "/source", APP_DIR, *copy_limits, *venv],
            app_id=release.app_id,
            own_network=True,
            workspace=fresh,
            source_fd=source_fd,
            tmp_mb=self._tmp_mb(release),
        )
        try:
            process = await spawn(
                *argv,
                env=root_env(),  # the copy needs none of the app's env; root must never have it
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(source_fd,),
            )
            try:
                async with asyncio.timeout(COPY_TIMEOUT_S):
                    out, err = await process.communicate()
            finally:
                await kill_and_reap(process)
        finally:
            os.close(source_fd)
        try:
            outcome = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            reason = err.decode(errors="replace").strip()[-300:] or f"exit {process.returncode}"
            raise InvalidArgument(f"the source could not be copied: {reason}") from None
        if "error" in outcome:
            error = QuotaExceeded if outcome["error"] == "quota" else InvalidArgument
            raise error(str(outcome.get("message")), hint=outcome.get("hint"))
        return CopyStats(
            files=int(outcome["files"]),
            bytes=int(outcome["bytes"]),
            symlinks=int(outcome["symlinks"]),
            venv=outcome.get("venv") is True,
        )

    def _build_steps(
        self, release: Release, workspace: Path, writer: LogWriter, *, venv_made: bool = False
    ) -> list[tuple[str, list[str]]]:
        """The build's steps; ``venv_made``: the sandboxed copy made the bare venv already."""
        steps: list[tuple[str, list[str]]] = []
        inside = Path(APP_DIR) if self.sandbox is not None else workspace
        python = "python3" if self.sandbox is not None else sys.executable
        if release.spec.runtime == "python":
            venv = inside / ".venv"
            if (workspace / "requirements.txt").is_file():
                steps.append(("venv", [python, "-m", "venv", str(venv)]))
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
            elif not venv_made:
                steps.append(("venv", [python, "-m", "venv", "--without-pip", str(venv)]))
        elif release.spec.runtime == "node" and (workspace / "package.json").is_file():
            npm = shutil.which("npm") if self.sandbox is None else _in_usr("npm")
            if npm is None:
                writer.system("package.json found but npm is not installed: skipping npm install")
            else:
                steps.append(("npm install", [npm, "install", "--no-audit", "--no-fund"]))
        if release.spec.build_command:
            steps.append(("build command", ["/bin/sh", "-c", release.spec.build_command]))
        return steps

    async def _run_step(
        self,
        state: ReleaseState,
        release: Release,
        step: str,
        argv: list[str],
        deadline: float,
        writer: LogWriter,
        space: int | None = None,
        procs: tuple[Path, ...] = (),
    ) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self._build_failed(state, release, step, None, writer)
        writer.system(f"{step}: {_shown(argv, state.workspace)}")
        env = self._env(
            release, state.workspace, port=None, egress=space is not None and bool(self.egress)
        )
        fds: tuple[int, ...] = ()
        if self.sandbox is not None and space is not None:
            # the app's env goes to bubblewrap in a descriptor: what runs as root before it
            # (nsenter, unshare, the stage, setpriv) gets the platform's (sandbox.root_env)
            envs = env_fd(env)
            fds, env = (space, envs), root_env()
            argv = [
                "nsenter",
                f"--net=/proc/self/fd/{space}",
                "--",
                *self.sandbox.wrap(
                    argv,
                    app_id=release.app_id,
                    own_network=False,
                    workspace=state.workspace,
                    limits=build_limits(release),
                    cgroup_procs=procs,
                    env_fd=envs,
                    tmp_mb=self._tmp_mb(release),
                ),
            ]
        try:
            process = await spawn(
                *argv,
                cwd=state.workspace,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=fds,
            )
        finally:
            if len(fds) > 1:
                os.close(fds[1])
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
            await kill_and_reap(process)
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
            self._build_failed(state, release, step, None, writer)
        if process.returncode != 0:
            self._build_failed(state, release, step, process.returncode, writer)

    def _build_failed(
        self,
        state: ReleaseState,
        release: Release,
        step: str,
        exit_code: int | None,
        writer: LogWriter,
    ) -> None:
        if exit_code is None:
            message = (
                f"{step} did not finish within {release.spec.build_timeout_s:g}s (build timeout)"
            )
        else:
            message = f"{step} failed with exit code {exit_code}"
        writer.system(f"build failed: {message}")
        raise BuildFailed(
            f"build of release {release.release_id} failed: {message}",
            release_id=release.release_id,
            step=step,
            exit_code=exit_code,
            timed_out=exit_code is None,
            log_tail=tail_text(state.log("build"), LOG_TAIL_LINES),
        )


async def _pump(stream: asyncio.StreamReader, name: str, writer: LogWriter) -> None:
    splitter = LineSplitter()
    while chunk := await stream.read(65536):
        writer.write([(name, text) for text in splitter.feed(chunk)])
    writer.write([(name, text) for text in splitter.flush()])


def _shown(argv: list[str], workspace: Path) -> str:
    """A step's command as the build log shows it: unsandboxed, the workspace is ``.`` and
    the server's python ``python3`` (the log is the tenant's: no server path in it)."""
    text = " ".join(argv)
    return text.replace(sys.executable, "python3").replace(str(workspace), ".")


def _swap_in(fresh: Path, workspace: Path) -> None:
    old = workspace.with_name("src.old")
    remove_tree(old)
    if workspace.exists():
        workspace.rename(old)
    fresh.rename(workspace)
    remove_tree(old)


def _in_usr(name: str) -> str | None:
    """``name`` on the sandbox's PATH (its /usr is the host's)."""
    return shutil.which(name, path="/usr/local/bin:/usr/bin:/bin")


def build_limits(release: Release) -> Limits:
    """A build's limits: the instance's, but room for compilers and package managers."""
    return Limits(
        memory_mb=max(release.spec.resources.memory_mb, 1024),
        cpus=max(release.spec.resources.cpus, 1.0),
        pids=max(release.spec.resources.pids, 512),
    )
