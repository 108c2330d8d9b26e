"""The program's collector settings: held while it loads, back for a command, tuned for a
server (appdeck/__main__.py, appdeck/tuning.py)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import appdeck.__main__ as program
import appdeck.cli
from appdeck.tuning import tune_gc


@pytest.fixture
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    gc.enable()


def _enabled_when_the_command_runs(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> bool:
    seen: list[bool] = []
    monkeypatch.setattr(sys, "argv", ["appdeck", *argv])
    monkeypatch.setattr(appdeck.cli, "main", lambda: seen.append(gc.isenabled()))
    program.main()
    return seen == [True]


@pytest.mark.usefixtures("collector")
def test_a_command_runs_with_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _enabled_when_the_command_runs(monkeypatch, ["version"])
    assert _enabled_when_the_command_runs(monkeypatch, [])


@pytest.mark.usefixtures("collector")
def test_serve_starts_with_the_collector_held_until_tune_gc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not _enabled_when_the_command_runs(monkeypatch, ["serve", "--dev"])
    tune_gc()
    assert gc.isenabled()
    assert gc.get_threshold()[0] == 20_000


def test_importing_appdeck_leaves_the_collector_alone() -> None:
    probe = "import gc, appdeck.cli, appdeck.__main__, appdeck.app; print(gc.isenabled())"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "True"


def test_the_installed_command_and_python_m_run_the_same_program() -> None:
    installed = [str(Path(sys.executable).with_name("appdeck"))]
    for command in (installed, [sys.executable, "-m", "appdeck"]):
        out = subprocess.run(
            [*command, "version"], capture_output=True, text=True, timeout=120, check=True
        )
        assert out.stdout.strip() == appdeck.__version__
