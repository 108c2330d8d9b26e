"""The suite's fork server (tests/support/zygote.py): a child is the process it was asked
for (argv, environment, directory, streams, session), and its end comes back as
:mod:`subprocess` reports one."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from appdeck import __version__
from tests.support.appdeck_process import appdeck_executable, clean_env, run_appdeck
from tests.support.zygote import ForkedProcess, zygote


def _spawn(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> ForkedProcess:
    with (
        open(os.devnull, "rb") as nothing,
        (tmp_path / "out").open("wb") as out,
        (tmp_path / "err").open("wb") as err,
    ):
        return zygote(clean_env()).spawn(
            [str(appdeck_executable()), *argv],
            env=clean_env() | (env or {}),
            cwd=tmp_path,
            stdin=nothing.fileno(),
            stdout=out.fileno(),
            stderr=err.fileno(),
            session=True,
        )


async def test_a_command_writes_to_the_streams_it_was_given_and_its_exit_code_comes_back(
    tmp_path: Path,
) -> None:
    async with asyncio.timeout(60):
        assert await _spawn(tmp_path, "version").wait() == 0
    assert __version__ in (tmp_path / "out").read_text()

    async with asyncio.timeout(60):
        assert await _spawn(tmp_path, "no-such-command").wait() == 2
    assert "No such command" in (tmp_path / "err").read_text()


async def test_a_child_runs_in_its_own_environment_directory_and_session(tmp_path: Path) -> None:
    child = _spawn(tmp_path, "tenant", "list", env={"APPDECK_DATA_DIR": "relative"})
    assert os.getsid(child.pid) == child.pid
    async with asyncio.timeout(60):
        assert await child.wait() == 2
    # APPDECK_DATA_DIR from its environment, resolved in its own directory
    assert f"no data directory at {tmp_path / 'relative'}" in (tmp_path / "err").read_text()


async def test_a_child_killed_by_a_signal_reads_as_minus_that_signal(tmp_path: Path) -> None:
    child = _spawn(tmp_path, "serve", "--port", "0", "--data-dir", str(tmp_path / "data"))
    child.kill()
    async with asyncio.timeout(60):
        assert await child.wait() == -signal.SIGKILL
    child.kill()  # reaped: a no-op, never a signal to whatever has the pid now


def test_run_captures_a_command_s_output_and_exit_code_as_subprocess_run_does() -> None:
    done = run_appdeck("version", env={})
    assert (done.returncode, done.stderr) == (0, "")
    assert __version__ in done.stdout
    refused = run_appdeck("no-such-command", env={})
    assert refused.returncode == 2
    assert "No such command" in refused.stderr
