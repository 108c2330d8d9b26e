"""The CI runner on the real driver: the test command runs in the app's build sandbox (its own
uid, no host secrets), after the build steps, within its time limit; its log comes back
masked and bounded; nothing of the run stays behind."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appdeck.model.release import AppSpec
from appdeck.platform.ci.runner import LOG_MAX_CHARS, Job, SandboxRunner, read_log
from appdeck.runtime import LocalDriver
from appdeck.runtime.driver import LogLine, LogPage
from appdeck.runtime.sandbox import Sandbox
from tests.runtime.conftest import kill_everything_under
from tests.support.sandbox import sandbox_or_skip

UID_BASE = 310_000


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return sandbox_or_skip(UID_BASE)


@pytest.fixture
async def driver(tmp_path: Path, sandbox: Sandbox) -> AsyncIterator[LocalDriver]:
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir()
    runtime = LocalDriver(runtime_dir, leftover_grace_s=1.0, sandbox=sandbox)
    try:
        yield runtime
    finally:
        for release_id in await runtime.releases():
            with contextlib.suppress(Exception):
                await runtime.remove(release_id)
        await runtime.detach()
        kill_everything_under(runtime_dir)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    source = tmp_path / "checkout"
    source.mkdir()
    (source / "status").write_text("green\n")
    return source


def _job(checkout: Path, command: str, *, timeout_s: float = 60.0, run: int = 1) -> Job:
    spec = AppSpec.from_dict({"runtime": "command", "run_command": "true"})
    return Job(
        app_id=41,
        app_name="shop",
        run=run,
        spec=spec,
        env={"TOKEN": "s3cr3t-value"},
        source=checkout,
        test_command=command,
        timeout_s=timeout_s,
    )


def _mask(text: str) -> str:
    return text.replace("s3cr3t-value", "[masked:TOKEN]")


async def test_a_passing_command_runs_as_the_apps_uid_in_its_workspace(
    driver: LocalDriver, sandbox: Sandbox, checkout: Path
) -> None:
    command = 'echo "uid=$(id -u) pwd=$(pwd) token=$TOKEN"; grep -qx green status'
    outcome = await SandboxRunner(driver).run(_job(checkout, command), _mask)
    assert (outcome.state, outcome.exit_code) == ("passed", 0)
    assert f"uid={sandbox.uid_for(41)} pwd=/app token=[masked:TOKEN]" in outcome.log
    assert "s3cr3t-value" not in outcome.log
    assert await driver.releases() == []  # the run's workspace is gone


async def test_a_failing_command_fails_with_its_exit_code_and_reads_no_host_secret(
    driver: LocalDriver, checkout: Path
) -> None:
    command = "cat /etc/shadow || echo no-shadow; ls /root || echo no-root; exit 3"
    outcome = await SandboxRunner(driver).run(_job(checkout, command), _mask)
    assert (outcome.state, outcome.exit_code) == ("failed", 3)
    assert "no-shadow" in outcome.log
    assert "root:" not in outcome.log


async def test_a_command_over_its_time_limit_is_killed(driver: LocalDriver, checkout: Path) -> None:
    outcome = await SandboxRunner(driver).run(
        _job(checkout, "sleep 60 & sleep 60", timeout_s=1.0), _mask
    )
    assert (outcome.state, outcome.exit_code) == ("timed_out", None)
    assert await driver.releases() == []


async def test_a_huge_log_keeps_its_end_and_drops_control_characters() -> None:
    lines = [LogLine(0.0, "stdout", f"line {n} \x1b[31mred\x00", n, 0) for n in range(40_000)]

    async def logs(release_id: str, kind: str, cursor: int = 0, limit: int = 200) -> LogPage:
        page = lines[cursor : cursor + limit]
        return LogPage(page, cursor + len(page))

    text = await read_log(logs, "41-ci1", _mask)
    assert text.startswith("[earlier output cut")
    assert len(text) <= LOG_MAX_CHARS + 100
    assert text.endswith("line 39999 [31mred")
    assert "\x00" not in text
    assert "\x1b" not in text
