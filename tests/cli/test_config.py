"""Every command refuses a bad setting with one line on stderr and exit code 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from appdeck.cli import cli
from tests.support.appdeck_process import start_appdeck


def _appdeck(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("APPDECK_")}
    return subprocess.run(
        [sys.executable, "-m", "appdeck", *args],
        env={**clean, "APPDECK_DATA_DIR": str(tmp_path / "data"), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_serve_with_a_bad_source_roots_value_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    done = _appdeck(tmp_path, "serve", "--port", "0", APPDECK_SOURCE_ROOTS="[not json")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("appdeck: invalid setting APPDECK_SOURCE_ROOTS: ")
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_serve_with_any_bad_setting_names_it(tmp_path: Path) -> None:
    done = _appdeck(tmp_path, "serve", APPDECK_KEEPALIVE_SECONDS="-1")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "appdeck: invalid setting APPDECK_KEEPALIVE_SECONDS: Input should be greater than 0"
    ]


async def test_serve_starts_with_source_roots_separated_by_the_path_separator(
    tmp_path: Path,
) -> None:
    roots = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b" / "{tenant}")])
    server = await start_appdeck(
        tmp_path / "data", log_dir=tmp_path / "logs", dev=False, env={"APPDECK_SOURCE_ROOTS": roots}
    )
    try:
        assert server.url.endswith("/mcp")
        assert "invalid setting" not in server.log_tail()
    finally:
        await server.stop()


@pytest.mark.parametrize(
    "command",
    [
        ["tenant", "create", "acme"],
        ["user", "create", "--tenant", "acme", "--name", "bob"],
        ["token", "create", "--tenant", "acme", "--user", "bob", "--scope", "apps:read"],
        ["audit", "tail"],
        ["keys", "rotate"],
        ["client", "create", "--tenant", "acme", "--name", "ci", "--scope", "apps:read"],
    ],
)
def test_admin_commands_refuse_a_bad_setting_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setenv("APPDECK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("APPDECK_ALLOWED_HOSTS", "[oops")
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.splitlines() == [
        "appdeck: invalid setting APPDECK_ALLOWED_HOSTS: starts with '[' but is not a JSON "
        "list; write values separated by ',' instead"
    ]


def test_serve_refuses_to_run_apps_unsandboxed_unless_told_and_says_what_to_install(
    tmp_path: Path,
) -> None:
    done = _appdeck(tmp_path, "serve", "--port", "0", "--ingress-port", "0", PATH="/nonexistent")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "bubblewrap" in lines[0]
    assert "APPDECK_SANDBOX=off" in lines[0]
