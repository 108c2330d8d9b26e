"""``/console/apps/{id}/logs``: a deployment's build or runtime log, masked exactly as
``tail_deploy_logs`` masks it (the same ``LogService.read``, as the viewer), paged forward by
cursor, and followed live.

A log line is the app's own text, so an attacker's: :func:`clean` replaces every control
character (CR and LF included: inside an SSE ``data:`` line they would start new fields, so new
events) and bidirectional override, and cuts a line at :data:`MAX_LINE` bytes, on the page
and in the stream alike.

The stream (``/logs/stream``) is Server-Sent Events: ``event: line``, ``data:`` one masked line,
``id:`` its cursor, so a reconnecting browser sends ``Last-Event-ID`` and misses nothing. It
sends at most :data:`RATE` lines a second, ends after :data:`LIFETIME_S` (the browser
reconnects from its last cursor), and one replica serves at most :data:`MAX_STREAMS` of them.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from appdeck.common.errors import AppDeckError, InvalidArgument, NotFound
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, PageRoute, error_page
from appdeck.console.render import page
from appdeck.console.views.app import app_context, app_id_of
from appdeck.platform.logs import LogKind, LogQuery, LogView

PAGE: Final = 200
"""Lines one page shows."""
MAX_LINE: Final = 4096
"""Bytes (UTF-8) of one line shown; the rest is cut."""
MAX_CURSOR: Final = 2**63 - 1
MAX_GREP: Final = 200
RATE: Final = 50
"""Lines a stream sends per second at most (a flood waits: the cursor loses nothing)."""
WAIT_S: Final = 15.0
"""How long one read of the stream waits for a line (then a keepalive)."""
LIFETIME_S: Final = 300.0
RETRY_MS: Final = 2000
MAX_STREAMS: Final = 200
PER_SESSION: Final = 8
"""Logs one console session follows at most at once on a replica."""
KINDS: Final[tuple[LogKind, ...]] = ("runtime", "build")

_UNSAFE: Final = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_streams = 0
_per_session: dict[str, int] = {}


def clean(text: str) -> str:
    """One line as shown: no control character (a tab stays), no bidi override, at most
    :data:`MAX_LINE` bytes of UTF-8 (cut at a character's boundary)."""
    text = _UNSAFE.sub("\ufffd", text[: MAX_LINE + 1])
    encoded = text.encode()
    if len(encoded) <= MAX_LINE:
        return text
    return encoded[:MAX_LINE].decode(errors="ignore") + " [cut]"


def _digits(raw: str | None, name: str, limit: int) -> int | None:
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19 or int(raw) > limit:
        raise InvalidArgument(f"{name} must be a whole number from 0 to {limit}")
    return int(raw)


def _query(request: Request) -> tuple[LogKind, int | None, str | None]:
    params = request.query_params
    kind = params.get("kind", "runtime")
    if kind not in KINDS:
        raise InvalidArgument("kind is runtime or build")
    number = _digits(params.get("number"), "number", 2**31 - 1)
    if number == 0:
        raise InvalidArgument("number starts at 1")
    grep = params.get("grep") or None
    if grep is not None and (len(grep) > MAX_GREP or "\x00" in grep):
        raise InvalidArgument(f"the filter is at most {MAX_GREP} characters of text")
    return ("build" if kind == "build" else "runtime"), number, grep


def _link(app_id: int, tail: str, **params: object) -> str:
    kept = {k: v for k, v in params.items() if v is not None}
    return f"/console/apps/{app_id}/logs{tail}" + (f"?{urlencode(kept)}" if kept else "")


async def show(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    view = await console.platform.apps.get(viewer.principal, app_id)  # a stranger: 404
    cursor = _digits(request.query_params.get("cursor"), "cursor", MAX_CURSOR)
    kind, number, grep = _query(request)
    query = LogQuery(kind=kind, cursor=cursor, limit=PAGE, grep=grep)
    found: LogView | None = None
    try:
        found = await console.platform.logs.read(viewer.principal, app_id, number, query)
    except NotFound:
        if number is not None:
            raise
    lines = [] if found is None else [(x, clean(x.text)) for x in found.lines]
    params = {"kind": kind, "number": found.number if found else None, "grep": grep}
    return page(
        request,
        "app/logs.html",
        title=f"Logs · {view.app.name}",
        log=found,
        lines=lines,
        kind=kind,
        kinds=KINDS,
        grep=grep or "",
        cursor=cursor,
        page_size=PAGE,
        newest=_link(app_id, "", **params),
        first=_link(app_id, "", cursor=0, **params),
        after=None if found is None else _link(app_id, "", cursor=found.next_cursor, **params),
        follow=None
        if found is None
        else _link(app_id, "/stream", cursor=found.next_cursor, **params),
        **app_context(view, viewer, app_id, "/logs"),
    )


def _last_event_id(request: Request) -> int | None:
    """The cursor a reconnecting browser sends (``Last-Event-ID``), validated."""
    raw = request.headers.get("last-event-id")
    return None if raw is None else _digits(raw.strip(), "Last-Event-ID", MAX_CURSOR)


def event(line: str, cursor: int) -> bytes:
    """One SSE event of one (already cleaned: single-line) log line."""
    return f"id: {cursor}\nevent: line\ndata: {line}\n\n".encode()


async def stream(request: Request, console: Console, viewer: Viewer) -> Response:
    app_id = app_id_of(request)
    await console.platform.apps.get(viewer.principal, app_id)  # a stranger: 404
    resumed = _last_event_id(request)
    cursor = (
        resumed
        if resumed is not None
        else _digits(request.query_params.get("cursor"), "cursor", MAX_CURSOR)
    )
    kind, number, grep = _query(request)
    if _streams >= MAX_STREAMS or _per_session.get(viewer.session_id, 0) >= PER_SESSION:
        return error_page(request, viewer, 503, "Busy", "Too many logs are followed.")
    base = LogQuery(kind=kind, limit=RATE, grep=grep, follow=True)
    # the first read answers now (a role refused, no deployment: a page, not a broken stream)
    first = await console.platform.logs.read(
        viewer.principal, app_id, number, replace(base, cursor=cursor, wait_s=0.0)
    )
    pinned = first.number  # the deployment the page showed, even once another goes live

    async def body() -> AsyncIterator[bytes]:
        global _streams
        _streams += 1  # counted once running: a body never started holds no slot
        _per_session[viewer.session_id] = _per_session.get(viewer.session_id, 0) + 1
        try:
            yield f"retry: {RETRY_MS}\n: logs\n\n".encode()
            until = time.monotonic() + LIFETIME_S
            found = first
            while True:
                started = time.monotonic()
                for line in found.lines:
                    yield event(clean(line.text), line.seq)
                if found.lines and found.next_cursor != found.lines[-1].seq:
                    yield f"id: {found.next_cursor}\n\n".encode()  # filtered lines: skip them
                elif not found.lines:
                    yield b": keepalive\n\n"
                left = until - time.monotonic()
                if left <= 0:
                    return
                # at most RATE lines a second: a full batch waits out the rest of its second
                pause = len(found.lines) / RATE - (time.monotonic() - started)
                if pause > 0:
                    await asyncio.sleep(min(pause, left))
                query = replace(base, cursor=found.next_cursor, wait_s=min(WAIT_S, left))
                try:
                    found = await console.platform.logs.read(
                        viewer.principal, app_id, pinned, query
                    )
                except AppDeckError:  # access revoked, app deleted: the stream just ends
                    return
        finally:
            _streams -= 1
            held = _per_session.get(viewer.session_id, 1) - 1
            if held > 0:
                _per_session[viewer.session_id] = held
            else:
                _per_session.pop(viewer.session_id, None)

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


ROUTES: Final[list[PageRoute]] = [
    ("/apps/{app_id}/logs", show, GET),
    ("/apps/{app_id}/logs/stream", stream, GET),
]
