"""``/console/events`` and ``/console/apps/{id}/events``: Server-Sent Events naming what
changed (``event: change``, data ``{"kind", "app", "deployment"}``); the page fetches the part
that changed. A comment every :data:`KEEPALIVE_S` keeps proxies from closing an idle stream; a
stream ends after :data:`LIFETIME_S` (the browser reconnects), so a revoked session's stream
does not outlive it by long."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute, error_page
from appdeck.console.live import END, TooManyStreams
from appdeck.console.views.app import app_id_of

KEEPALIVE_S: Final = 15.0
LIFETIME_S: Final = 300.0
RETRY_MS: Final = 2000


async def overview_events(request: Request, console: Console, viewer: Viewer) -> Response:
    return await _stream(request, console, viewer, None)


async def app_events(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    await console.platform.apps.get(viewer.principal, app_id)  # a stranger's app: 404
    return await _stream(request, console, viewer, app_id)


async def _stream(
    request: Request, console: Console, viewer: Viewer, app_id: int | None
) -> Response:
    follow = console.live.follow(viewer.principal.tenant, app_id)
    try:
        queue = await follow.__aenter__()
    except TooManyStreams:
        return error_page(request, viewer, 503, "Busy", "Too many live pages are open.")

    async def body() -> AsyncIterator[bytes]:
        try:
            yield f"retry: {RETRY_MS}\n: live\n\n".encode()
            until = time.monotonic() + LIFETIME_S
            while (left := until - time.monotonic()) > 0:
                try:
                    async with asyncio.timeout(min(KEEPALIVE_S, left)):
                        event = await queue.get()
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                if event is END:
                    return
                yield b"event: change\ndata: " + event.wire() + b"\n\n"
        finally:
            with contextlib.suppress(Exception):
                await follow.__aexit__(None, None, None)

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


ROUTES: Final[list[PageRoute]] = [
    ("/events", overview_events, GET),
    ("/apps/{app_id}/events", app_events, GET),
]
