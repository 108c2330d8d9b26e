"""The ``appdeck`` command line."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Annotated, Any

import typer

from appdeck import __version__

cli = typer.Typer(
    help="AppDeck: a self-hosted application platform driven over MCP.", no_args_is_help=True
)


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind (default 127.0.0.1).")] = None,
    port: Annotated[
        int | None, typer.Option(help="Control-plane port; 0 picks a free one.")
    ] = None,
    ingress_port: Annotated[int | None, typer.Option(help="Ingress router port.")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(envvar="APPDECK_DATA_DIR", help="Data directory.")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning or error.")] = None,
    with_conformance_fixtures: Annotated[
        bool,
        typer.Option(help="Register the MCP conformance suite's test tools/resources/prompts."),
    ] = False,
) -> None:
    """Run the MCP server (control plane) until interrupted."""
    from appdeck.settings import Settings

    overrides: dict[str, Any] = {}
    for key, value in (
        ("host", host),
        ("port", port),
        ("ingress_port", ingress_port),
        ("data_dir", data_dir),
        ("log_level", log_level),
    ):
        if value is not None:
            overrides[key] = value
    if with_conformance_fixtures:
        overrides["with_conformance_fixtures"] = True
    settings = Settings(**overrides)
    try:
        import uvloop

        uvloop.run(_serve(settings))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(_serve(settings))


async def _serve(settings: Any) -> None:
    import uvicorn

    from appdeck import logs
    from appdeck.app import Services

    logs.configure(settings.log_level, settings.log_format)
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    port = sock.getsockname()[1]
    services = await Services.start(settings, port=port)
    config = uvicorn.Config(
        services.asgi(),
        http="httptools",
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=3,
        server_header=False,
    )
    server = uvicorn.Server(config)
    url = f"{settings.base_url(port)}/mcp"
    print(f"AppDeck {__version__} MCP server listening on {url}", flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        await services.stop()
        sock.close()


@cli.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def main() -> None:
    cli()


if __name__ == "__main__":  # pragma: no cover
    main()
