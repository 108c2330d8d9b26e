"""The settings every command starts from: a bad value is one line on stderr and exit code 2."""

from __future__ import annotations

from typing import Any

import typer

from appdeck.settings import InvalidSetting, Settings, load

BAD_SETTING_EXIT = 2


def settings_or_exit(**overrides: Any) -> Settings:
    """The settings (environment, then ``overrides`` from the command's options), or exit 2 with
    ``appdeck: invalid setting APPDECK_X: <reason>`` when one of them cannot be used."""
    try:
        return load(**overrides)
    except InvalidSetting as exc:
        typer.echo(f"appdeck: {exc}", err=True)
        raise typer.Exit(BAD_SETTING_EXIT) from None
