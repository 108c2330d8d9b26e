"""One version string: the package's, in `appdeck version`, the settings (/healthz) and the MCP
serverInfo, unless a deployment names its own with APP_VERSION."""

from __future__ import annotations

from importlib import metadata

import pytest
from typer.testing import CliRunner

import appdeck
from appdeck.cli import cli
from appdeck.protocol.server import ServerInfo
from appdeck.settings import Settings


def test_the_version_is_the_installed_packages_and_the_source_trees() -> None:
    assert appdeck.__version__ == metadata.version("appdeck") == appdeck.VERSION
    assert appdeck.__version__ != "dev"


def test_the_cli_the_settings_and_server_info_say_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("APP_VERSION", raising=False)
    monkeypatch.delenv("APPDECK_APP_VERSION", raising=False)
    for args in (["version"], ["--version"]):
        assert CliRunner().invoke(cli, args).stdout.strip() == appdeck.__version__
    assert Settings().app_version == appdeck.__version__
    assert ServerInfo().version == appdeck.__version__


def test_app_version_overrides_only_when_set_and_not_blank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APP_VERSION", "2026.11.23-abc1234")
    assert Settings().app_version == "2026.11.23-abc1234"
    monkeypatch.setenv("APP_VERSION", "  ")
    assert Settings().app_version == appdeck.__version__
