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


def database_or_exit(settings: Settings, *, may_create: bool = False) -> str:
    """The database URL of an admin command, or exit 2 with one line when the data directory
    (or, unless ``may_create``, its SQLite database) is not there: a command run from the wrong
    directory must not make an empty one and then say "no user"."""
    data_dir = settings.data_dir
    if not data_dir.is_dir():
        typer.echo(
            f"appdeck: no data directory at {data_dir.resolve()} (pass --data-dir or set "
            "APPDECK_DATA_DIR; `appdeck serve` creates one)",
            err=True,
        )
        raise typer.Exit(BAD_SETTING_EXIT)
    if not settings.database_url and not may_create and not (data_dir / "appdeck.db").is_file():
        typer.echo(
            f"appdeck: no database in {data_dir.resolve()} (pass --data-dir or set "
            "APPDECK_DATA_DIR; `appdeck serve` or `appdeck tenant create` creates one)",
            err=True,
        )
        raise typer.Exit(BAD_SETTING_EXIT)
    return settings.database()
