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

from appdeck.common.errors import NotFound
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute, error_page
from appdeck.console.live import END, Event, TooManyStreams
from appdeck.console.views.app import app_id_of

KEEPALIVE_S: Final = 15.0
LIFETIME_S: Final = 300.0
RETRY_MS: Final = 2000
VISIBLE_S: Final = 30.0
VISIBLE_MAX: Final = 1000


async def overview_events(request: Request, console: Console, viewer: Viewer) -> Response:
    return await _stream(request, console, viewer, None)


async def app_events(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    await console.platform.apps.get(viewer.principal, app_id)  # a stranger's app: 404
    return await _stream(request, console, viewer, app_id)


async def _stream(
    request: Request, console: Console, viewer: Viewer, app_id: int | None
) -> Response:
    follow = console.live.follow(viewer.principal.tenant, app_id, owner=viewer.session_id)
    try:
        queue = await follow.__aenter__()
    except TooManyStreams:
        return error_page(request, viewer, 503, "Busy", "Too many live pages are open.")

    visible = _Visible(console, viewer) if app_id is None and not viewer.admin else _everything

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
                if not await visible(event):
                    continue
                yield b"event: change\ndata: " + event.wire() + b"\n\n"
        finally:
            with contextlib.suppress(Exception):
                await follow.__aexit__(None, None, None)

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _everything(event: Event) -> bool:
    return True


class _Visible:
    """Which apps of the tenant a member's overview stream may name: those the member has a
    role on (a caller with no role on an app does not learn it exists, nor when it changes).
    Asked of the platform once per app, remembered for :data:`VISIBLE_S` (a grant or a
    revocation shows within that)."""

    def __init__(self, console: Console, viewer: Viewer) -> None:
        self._console, self._viewer = console, viewer
        self._known: dict[int, tuple[bool, float]] = {}

    async def __call__(self, event: Event) -> bool:
        if event.app_id is None:  # a resync names no app
            return True
        now = time.monotonic()
        known = self._known.get(event.app_id)
        if known is not None and known[1] > now:
            return known[0]
        try:
            await self._console.platform.apps.get(self._viewer.principal, event.app_id)
            seen = True
        except NotFound:
            seen = False
        if len(self._known) >= VISIBLE_MAX:
            self._known.clear()
        self._known[event.app_id] = (seen, now + VISIBLE_S)
        return seen


ROUTES: Final[list[PageRoute]] = [
    ("/events", overview_events, GET),
    ("/apps/{app_id}/events", app_events, GET),
]
