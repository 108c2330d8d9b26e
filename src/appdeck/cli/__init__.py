"""The ``appdeck`` command line: ``serve``, and the admin commands that work beside it."""

from __future__ import annotations

from typing import Annotated

import typer

from appdeck import __version__
from appdeck.cli import admin, apps, lifecycle, serve

cli = typer.Typer(
    help="AppDeck: a self-hosted application platform driven over MCP.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@cli.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """AppDeck: a self-hosted application platform driven over MCP."""


cli.command()(serve.serve)
cli.add_typer(admin.tenant, name="tenant")
cli.add_typer(admin.user, name="user")
cli.add_typer(admin.token, name="token")
cli.add_typer(apps.app, name="app")
cli.add_typer(admin.audit, name="audit")
cli.add_typer(admin.keys, name="keys")
cli.add_typer(admin.client, name="client")
cli.add_typer(lifecycle.grant, name="grant")
cli.add_typer(lifecycle.session, name="session")


@cli.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def main() -> None:
    cli()
