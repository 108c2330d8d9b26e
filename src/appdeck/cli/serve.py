"""``appdeck serve``: the control plane (MCP endpoint, OAuth server, health, metrics)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from appdeck import __version__
from appdeck.cli import connect

if TYPE_CHECKING:  # the server's modules load when `serve` runs, not for every CLI command
    from appdeck.common.listen import ListenError

DEV_TOKEN_TTL = 12 * 3600


class PortUnavailable(Exception):
    """A listener cannot bind: one line naming the port and the option that sets it."""

    def __init__(self, exc: ListenError, listener: str, option: str, variable: str) -> None:
        super().__init__(
            f"{listener}{exc}: choose another with {option} or {variable} (0 picks a free one)"
        )
        self.port = exc.port


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
    dev: Annotated[
        bool,
        typer.Option(help="Create a dev tenant and admin user if missing; print a dev token."),
    ] = False,
    with_conformance_fixtures: Annotated[
        bool, typer.Option(help="Register the MCP conformance suite's test tools and resources.")
    ] = False,
    stop_apps_on_exit: Annotated[
        bool,
        typer.Option(
            help="Stop the apps' processes when the server stops (default: they keep "
            "running and the next start adopts them)."
        ),
    ] = False,
) -> None:
    """Run the MCP server until interrupted."""
    from appdeck.cli.config import settings_or_exit
    from appdeck.platform.tls.pem import BadCertificate
    from appdeck.runtime.sandbox import SandboxUnavailable
    from appdeck.settings import InvalidSetting

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
    if dev and "APPDECK_SANDBOX" not in os.environ:
        overrides["sandbox"] = "auto"  # a one-tenant dev setup may run apps unconfined
    settings = settings_or_exit(**overrides)
    try:
        _run(_serve(settings, dev, stop_apps_on_exit))
    except PortUnavailable as exc:  # one line, no traceback: the port is what to change
        typer.echo(f"appdeck serve: {exc}", err=True)
        raise typer.Exit(1) from None
    except SandboxUnavailable as exc:  # one line: what to install or set
        typer.echo(f"appdeck serve: {exc}", err=True)
        raise typer.Exit(2) from None
    except (BadCertificate, InvalidSetting) as exc:  # one line: which setting and why
        typer.echo(f"appdeck serve: {exc}", err=True)
        raise typer.Exit(1) from None


def server_class(before_shutdown: Callable[[], None] = lambda: None) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn, after a graceful shutdown on SIGTERM or SIGINT, raises the signal again
        with the default handler back in place: the process died there, before ``_serve``'s
        cleanup (``Services.stop``: replicas unregistering, the edge's control servers put in
        maintenance, ``--stop-apps-on-exit``). Here the signal only ends serving; the process
        then stops as it should and exits 0."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                try:
                    yield
                finally:
                    self._captured_signals.clear()  # nothing raised again once served

        async def shutdown(self, sockets: Any = None) -> None:
            """First end what would hold a connection open forever (listen streams, which
            then send their response), then uvicorn's own graceful shutdown."""
            before_shutdown()
            await super().shutdown(sockets)

    return Server


def _run(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(main)
    else:
        uvloop.run(main)


async def _serve(settings: Any, dev: bool, stop_apps: bool = False) -> None:
    import uvicorn

    from appdeck import logs
    from appdeck.app import Services
    from appdeck.auth import hashing
    from appdeck.common.listen import ListenError, listen
    from appdeck.model import hostnames
    from appdeck.transport.http11 import bounded_protocol, http_limits
    from appdeck.tuning import imports_done, tune_gc

    imports_done()  # the collection at tune_gc() walks only what start-up makes
    logs.configure(settings.log_level, settings.log_format, settings.log_libraries)
    # connections queue from now on, so the printed URL is usable at once; a loopback host is
    # held on 127.0.0.1 and [::1] both, so no app can sit on the other one
    try:
        socks = listen(settings.host, settings.port)
    except ListenError as exc:
        raise PortUnavailable(exc, "", "--port", "APPDECK_PORT") from None
    port = socks[0].getsockname()[1]
    try:
        services = await Services.start(settings, port=port)
    except ListenError as exc:  # the ingress router's listener (the only one it opens)
        for sock in socks:
            sock.close()
        raise PortUnavailable(exc, "ingress ", "--ingress-port", "APPDECK_INGRESS_PORT") from None
    config = uvicorn.Config(
        services.asgi(),
        # uvicorn's httptools, one syscall per response, header/body limits and timeouts
        http=bounded_protocol(http_limits(settings)),
        limit_concurrency=settings.max_concurrency,
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=3,
        timeout_keep_alive=settings.idle_connection_seconds,
        server_header=False,
        proxy_headers=False,  # X-Forwarded-* are not trusted unless a proxy is configured
    )
    server = server_class(services.drain)(config)
    tune_gc()
    if hashing.fast_for_tests():
        logging.getLogger("appdeck").warning(
            "%s is set: passwords are hashed with test-only parameters, unfit for production",
            hashing.FAST_FOR_TESTS,
        )
    url = f"{services.base_url}/mcp"
    marker = settings.data_dir / "server.json"
    marker.write_text(json.dumps({"url": url, "base_url": services.base_url, "pid": os.getpid()}))
    deployed = "" if settings.app_version == __version__ else f" ({settings.app_version})"
    print(f"AppDeck {__version__}{deployed} MCP server listening on {url}", flush=True)
    if settings.public_url:  # behind a proxy or balancer: where this very process listens
        local = settings.model_copy(update={"public_url": None}).base_url(port)
        print(f"This process listens on {local}/mcp", flush=True)
    if services.ingress is not None:
        ingress = f"http://{hostnames.PATTERN}:{services.ingress.port}/"
        print(f"Apps are served by the ingress router at {ingress}", flush=True)
    token = await _dev_setup(services) if dev else None
    print(connect.connect_block(url, token), flush=True)
    if services.console is not None:  # the people behind the agents: docs/console.md
        print(f"Console (sign in with a user's password): {url.removesuffix('/mcp')}/console")
    if not dev and not settings.external_idp and not await _anyone_can_sign_in(services):
        print(connect.first_user_hint(settings.data_dir), flush=True)
    try:
        await server.serve(sockets=socks)
    finally:
        await services.stop(stop_apps=stop_apps)
        for sock in socks:
            sock.close()
        marker.unlink(missing_ok=True)


async def _dev_setup(services: Any) -> str | None:
    """``--dev``: the 'dev' tenant and admin user (made once), and a 12-hour token printed."""
    from appdeck.auth import scopes
    from appdeck.auth.admin import IdentityAdmin, QueuedAudit

    admin = IdentityAdmin(services.identities, services.token_issuer, QueuedAudit(services.audit))
    password = await admin.ensure_dev()
    if password:
        print(f"Created tenant 'dev' with admin user 'dev', password: {password}", flush=True)
    if services.token_issuer is None:
        return None
    token, _ = await admin.mint_access_token(
        "dev", "dev", scopes.render(set(scopes.ALL)), expires_in=DEV_TOKEN_TTL
    )
    print(f"Dev access token (12 h, every scope):\n{token}", flush=True)
    return str(token)


async def _anyone_can_sign_in(services: Any) -> bool:
    """Whether some enabled user of an enabled tenant has a password (a few queries, once)."""
    identities = services.identities
    for tenant in await identities.list_tenants():
        if tenant.disabled:
            continue
        for user in await identities.list_users(tenant.id):
            if user.password_hash and not user.disabled:
                return True
    return False
