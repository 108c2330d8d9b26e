"""Everything on the control-plane port that is not ``/mcp``: health and metrics (Starlette),
and the router that sends ``/mcp`` straight to the raw ASGI app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from appdeck.transport.responses import ASGIApp, Receive, Scope, Send

HealthCheck = Callable[[], Awaitable[dict[str, object]]]


def control_plane(health: HealthCheck, extra: list[Route] | None = None) -> Starlette:
    async def healthz(request: Request) -> Response:
        body = await health()
        return JSONResponse(body, status_code=200 if body.get("status") == "ok" else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    routes = [Route("/healthz", healthz), Route("/metrics", metrics), *(extra or [])]
    return Starlette(routes=routes)


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
