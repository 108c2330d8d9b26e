"""Builds of the local driver: copy a release's source into a fresh workspace, then run its
build steps (a venv and ``pip install``, ``npm install``, the build command) with a deadline,
logging their output to ``build.log``.

A release is built once per spec (``built.json``); no step outlives the build: whatever a
step started is killed when it ends, succeeds or times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from pathlib import Path
from typing import Final

from appdeck.common.errors import Conflict
from appdeck.platform.runtime.core import DriverCore
from appdeck.platform.runtime.driver import BuildFailed, ReleaseSpec
from appdeck.platform.runtime.logs import tail_text
from appdeck.platform.runtime.model import Release, validate
from appdeck.platform.runtime.procs import kill_tree
from appdeck.platform.runtime.shim import LineSplitter, LogWriter
from appdeck.platform.runtime.state import read_json, spec_to_json, write_json
from appdeck.platform.runtime.workspace import copy_source, remove_tree

LOG_TAIL_LINES: Final = 20


class BuildMixin(DriverCore):
    """``prepare``: build a release's workspace."""

    # ---------------------------------------------------------------- build

    async def prepare(self, spec: ReleaseSpec, *, rebuild: bool = False) -> None:
        validate(spec)
        release = self._release(spec.release_id, create_for=spec)
        async with release.lock:
            built = release.directory / "built.json"
            if (
                not rebuild
                and release.workspace.is_dir()
                and read_json(built) == spec_to_json(spec)
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
            write_json(built, spec_to_json(spec))

    async def _prepare(self, release: Release, spec: ReleaseSpec, writer: LogWriter) -> None:
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
        write_json(release.directory / "release.json", spec_to_json(spec))
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
        release: Release,
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
            kill_tree(process.pid)
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
        release: Release,
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


async def _pump(stream: asyncio.StreamReader, name: str, writer: LogWriter) -> None:
    splitter = LineSplitter()
    while chunk := await stream.read(65536):
        writer.write([(name, text) for text in splitter.feed(chunk)])
    writer.write([(name, text) for text in splitter.flush()])


def _swap_in(fresh: Path, workspace: Path) -> None:
    old = workspace.with_name("src.old")
    remove_tree(old)
    if workspace.exists():
        workspace.rename(old)
    fresh.rename(workspace)
    remove_tree(old)
