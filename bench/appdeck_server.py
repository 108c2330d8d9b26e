"""AppDeck under test: the real composition root plus one ``echo`` tool, on uvicorn.

Builds the server in-process the way ``appdeck serve`` does (``Services.start(settings)``,
``services.asgi()``), registers ``echo`` in the registry, and serves it with uvicorn (httptools,
uvloop, no access log, lifespan off) on ``--port``. The data directory is a fresh temporary
directory unless ``--data-dir`` is given; the log level is ``warning`` unless ``--log-level``
says ``info`` (``appdeck serve``'s default: an activity line per tools/call).

``--auth bearer`` (default) keeps the production path: the bearer authenticator, the per-token
rate limiter and the audit log. Like ``appdeck serve --dev`` it creates the dev tenant and user
and mints a 12 h access token with every scope, written to ``--token-file``. The rate limit is
raised to 1e9 req/s so that one token can drive the load (the check itself still runs).
``--auth anonymous`` swaps in ``AllowAnonymous`` (no token; the guard and audit stay).

    python bench/appdeck_server.py --port 18766 --token-file /tmp/token
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvicorn

from appdeck import logs
from appdeck.app import Services
from appdeck.cli.serve import server_class
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from appdeck.transport.http11 import bounded_protocol, http_limits
from appdeck.tuning import tune_gc

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}
TOKEN_TTL = 12 * 3600


async def echo(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": arguments["text"]}]}


async def mint_dev_token(services: Services) -> str:
    """What ``appdeck serve --dev`` prints: a token for dev/dev with every scope."""
    from appdeck.auth import scopes
    from appdeck.auth.admin import IdentityAdmin

    admin = IdentityAdmin(services.identities, services.token_issuer)
    await admin.ensure_dev()
    token, _ = await admin.mint_access_token(
        "dev", "dev", scopes.render(set(scopes.ALL)), expires_in=TOKEN_TTL
    )
    return str(token)


def uvicorn_config(services: Services, settings: Settings) -> uvicorn.Config:
    """uvicorn serving the composition root's ASGI app as ``appdeck serve`` runs it."""
    return uvicorn.Config(
        services.asgi(),
        http=bounded_protocol(http_limits(settings)),  # as appdeck serve runs it
        limit_concurrency=settings.max_concurrency,
        loop="uvloop",
        lifespan="off",
        access_log=False,
        log_config=None,
        log_level="warning",
        timeout_graceful_shutdown=3,
        server_header=False,
        proxy_headers=False,  # X-Forwarded-* are not trusted unless a proxy is configured
    )


async def serve(args: argparse.Namespace, data_dir: Path) -> None:
    settings = Settings(
        host=args.host,
        port=args.port,
        data_dir=data_dir,
        log_level=args.log_level,
        rate_limit_per_second=1e9,
        rate_limit_burst=10**9,
        stateless_era=args.stateless,
        otlp_endpoint=args.otlp_endpoint,
    )
    logs.configure(settings.log_level, settings.log_format)
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    if args.auth == "anonymous":
        from appdeck.auth import AllowAnonymous

        services = await Services.start(settings, authenticator=AllowAnonymous(), port=port)
    else:
        services = await Services.start(settings, port=port)
    # the same catalogue as the SDK server (one echo tool), so tools/list compares like with like
    services.registry.tools.clear()
    services.registry.add_tool(
        ToolDef(
            name="echo", description="Echo the given text", input_schema=ECHO_SCHEMA, handler=echo
        )
    )
    if args.token_file is not None:
        token = await mint_dev_token(services) if args.auth == "bearer" else ""
        tmp = args.token_file.with_suffix(".tmp")
        tmp.write_text(token)
        tmp.replace(args.token_file)
    config = uvicorn_config(services, settings)
    server = server_class(services.drain)(config)  # as serve: a SIGINT ends serving only
    tune_gc()  # as appdeck serve does
    try:
        await server.serve(sockets=[sock])
    finally:
        await services.stop(stop_apps=True)  # HAProxy too: it outlives a plain stop
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18766)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--auth", choices=("bearer", "anonymous"), default="bearer")
    parser.add_argument(
        "--stateless", action="store_true", help="serve MCP 2026-07-28 too (stateless era)"
    )
    parser.add_argument(
        "--traced",
        action="store_true",
        help="trace every request (100 %% sampled) into an OTLP receiver that drops them",
    )
    parser.add_argument(
        "--token-file", type=Path, default=None, help="write the bearer token here when ready"
    )
    parser.add_argument("--log-level", choices=("warning", "info"), default="warning")
    args = parser.parse_args()
    args.otlp_endpoint = None
    sink = None
    if args.traced:
        sink = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("otlp_sink.py"))],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert sink.stdout is not None
        args.otlp_endpoint = f"http://127.0.0.1:{int(sink.stdout.readline())}"
    import uvloop

    with tempfile.TemporaryDirectory(prefix="appdeck-bench-") as tmp:
        try:
            uvloop.run(serve(args, args.data_dir or Path(tmp)))
        finally:
            if sink is not None:
                sink.terminate()
                sink.wait(timeout=10)


if __name__ == "__main__":
    main()
