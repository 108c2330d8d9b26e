"""Everything on the control-plane port that is not ``/mcp``: health and metrics (Starlette),
and the router that sends ``/mcp`` straight to the raw ASGI app."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from appdeck.transport.edge_forwarded import is_loopback
from appdeck.transport.responses import ASGIApp, Receive, Scope, Send

HealthCheck = Callable[[], Awaitable[dict[str, object]]]


def control_plane(
    health: HealthCheck,
    extra: Sequence[BaseRoute] | None = None,
    *,
    metrics_token: str | None = None,
) -> Starlette:
    """``metrics_token``: what a client beyond loopback must present to read ``/metrics``
    (see :func:`may_scrape`); None: loopback only."""
    expected = metrics_token.encode() if metrics_token else None

    async def healthz(request: Request) -> Response:
        body = await health()
        return JSONResponse(body, status_code=200 if body.get("status") == "ok" else 503)

    async def metrics(request: Request) -> Response:
        client = request.client.host if request.client else None
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        presented = credentials.strip().encode() if scheme.lower() == "bearer" else b""
        if not may_scrape(client, presented, expected):
            return JSONResponse(
                {"error": "metrics are served to loopback, or to a client with the scrape token"},
                status_code=401 if expected else 403,
                headers={"www-authenticate": 'Bearer realm="metrics"'} if expected else None,
            )
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    routes: list[BaseRoute] = [Route("/healthz", healthz), Route("/metrics", metrics)]
    routes += extra or []
    return Starlette(routes=routes)


def may_scrape(client: str | None, presented: bytes, expected: bytes | None) -> bool:
    """Loopback may read the metrics; anyone else must present the scrape token. The client
    is the connection's peer, or the data plane's ``X-Forwarded-For`` (only believed from
    HAProxy, :mod:`appdeck.transport.edge_forwarded`), so a request through the edge is not
    loopback."""
    if client is not None and is_loopback(client):
        return True
    return expected is not None and hmac.compare_digest(presented, expected)


def json_route(path: str, document: dict[str, object]) -> Route:
    """A GET route that always answers the same JSON document."""

    async def endpoint(request: Request) -> Response:
        return JSONResponse(document, headers={"access-control-allow-origin": "*"})

    return Route(path, endpoint)


class Router:
    """``/mcp`` to the MCP app without any framework in between; the rest to Starlette."""

    def __init__(self, mcp: ASGIApp, other: ASGIApp) -> None:
        self._mcp = mcp
        self._other = other

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in ("/mcp", "/mcp/"):
            await self._mcp(scope, receive, send)
        else:
            await self._other(scope, receive, send)
