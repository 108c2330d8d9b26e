"""uvicorn's httptools HTTP/1.1 protocol, with each response sent in one system call.

uvicorn writes the status line and headers when the app sends ``http.response.start`` and the
body when it sends ``http.response.body``: two ``send()`` calls for every JSON response. On a
loopback or LAN connection each one walks the kernel's whole TCP path, and in ``bench/run.py``
the first of them alone was ~15 % of the server's CPU per ``tools/call``.

:class:`CoalescingHttpToolsProtocol` hands uvicorn a transport that keeps what is written during
one event-loop step and writes it at the end of that step, with one ``writelines`` (a single
``writev``). A JSON response (header + body, sent back to back) is one system call; an SSE stream
still goes out event by event, each as soon as the task that wrote it yields. Everything else is
uvicorn's own code: parsing, keep-alive, flow control, limits.

Serve with ``uvicorn.Config(app, http=CoalescingHttpToolsProtocol, loop="uvloop", ...)``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from appdeck.transport.cycle import LeanRequests

log = logging.getLogger("appdeck.transport")


class CoalescingTransport:
    """A transport that defers writes to the end of the current loop step (see the module)."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        pending = self._pending
        if pending is None:
            self._pending = [data]
            self._loop.call_soon(self.flush)
        else:
            pending.append(data)

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.writelines(pending)

    def get_write_buffer_size(self) -> int:
        pending = self._pending
        waiting = sum(len(chunk) for chunk in pending) if pending else 0
        return self._transport.get_write_buffer_size() + waiting

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()  # what was written before close() still goes out, as asyncio promises
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    # What uvicorn calls on every request, delegated by name: reaching them through
    # ``__getattr__`` raised (and formatted) an AttributeError at each call first.

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def __getattr__(self, name: str) -> Any:
        # set_protocol, is_reading, ... (rare)
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(LeanRequests, HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol over a :class:`CoalescingTransport`, its request
    cycle :class:`~appdeck.transport.cycle.LeanCycle`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(cast(asyncio.Transport, coalescing))


# -- limits -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one listener lets a client do before it has sent a whole request (settings:
    ``APPDECK_MAX_HEADER_BYTES`` and the rest, next to ``APPDECK_MAX_BODY_BYTES``)."""

    max_header_bytes: int = 64 * 1024
    """Request line and headers together; past it: ``431`` and the connection is closed."""
    max_headers: int = 100
    """Header fields per request; past it: ``431``."""
    header_timeout: float = 10.0
    """From a request's first byte (or the connection's opening) to its last header line;
    past it: ``408`` and close (slowloris)."""
    body_timeout: float = 30.0
    """Longest silence while a request body is being sent (reset by every chunk, not counted
    while the app itself has paused reading); past it the connection is closed."""
    max_connections_per_ip: int = 256
    """Open connections from one client address; past it the new one is closed at once."""
    max_concurrency: int = 2000
    """Open connections (or running requests) on the listener; past it: ``503``
    (uvicorn's ``limit_concurrency``)."""


_CLOSE_431 = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 31\r\nconnection: close\r\n\r\nRequest header fields too large"
)
_CLOSE_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 15\r\nconnection: close\r\n\r\nRequest timeout"
)


LINGER = 1.0
"""Seconds a refused connection's incoming bytes are dropped before it is closed."""


class _TooManyHeaders(Exception):
    pass


if TYPE_CHECKING:
    _Protocol = HttpToolsProtocol
else:  # at run time the mixin is put before uvicorn's class (bounded_protocol)
    _Protocol = object


class BoundedMixin(_Protocol):
    """Header size/count limits, header and body read timeouts and a per-IP connection cap
    on uvicorn's httptools protocol.

    httptools has no header-size limit of its own (it accumulates a header value for as long
    as bytes come), so the bytes fed while a request's headers are incomplete are counted here.
    The timeouts cost a request no timer: each connection notes when its current phase
    (headers, the last body chunk, or idling between requests) began, and one sweep a second
    per listener closes the connections past their time (uvicorn's keep-alive timeout too).
    """

    limits: HttpLimits = HttpLimits()
    per_ip: dict[str, int] = {}
    """Open connections per client address, for the listener this class serves."""
    open_connections: set[BoundedMixin] = set()
    sweeper: list[asyncio.TimerHandle | None] = [None]

    # set by connection_made
    _ip: str | None
    _header_bytes: int
    _too_many_headers: bool
    _reading_headers: bool
    _since: float | None
    """When the current phase began (headers) or the last body bytes came; None: not timed."""
    _accepted: bool
    _lingering: bool
    _idle_since: float | None
    """When the last response of an idle keep-alive connection completed; None: not idle."""

    # -- the protocol's callbacks (before uvicorn's own, by the MRO) ---------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self._bounded_open(transport):
            super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._accepted:  # refused in connection_made
            return
        self._bounded_close()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering or self.transport.is_closing():
            return  # refused: what still comes is dropped unread
        self._idle_since = None
        if self._since is None:  # a request's first bytes: its headers are due from now
            self._since = self.loop.time()
        super().data_received(data)
        if not self._reading_headers:
            self._since = self.loop.time()  # body bytes came
        elif not self.transport.is_closing():
            if self._header_bytes < 0:  # a pipelined request began inside this chunk
                self._header_bytes = 0
            else:
                self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                self._refuse_headers()

    def send_400_response(self, msg: str) -> None:
        if self._too_many_headers:
            self._refuse_headers()
        else:
            super().send_400_response(msg)

    def on_headers_complete(self) -> None:
        if len(self.headers) > self.limits.max_headers:  # their bytes are bounded already
            self._too_many_headers = True
            raise _TooManyHeaders  # httptools makes it a parser error: send_400_response
        self._reading_headers = False
        self._header_bytes = 0
        self._since = self.loop.time()
        super().on_headers_complete()

    def handle_websocket_upgrade(self) -> None:
        # the connection passes to the websocket protocol: this one no longer counts it
        self._bounded_close()
        self._since = None
        super().handle_websocket_upgrade()

    def on_message_complete(self) -> None:
        self._reading_headers = True
        self._since = None  # the app answers now; the next request's first byte times it
        self._header_bytes = -1  # the next request's first chunk is counted from its start
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """uvicorn's, except that an idle keep-alive connection is closed by the sweep (after
        ``timeout_keep_alive`` seconds, within a second more) instead of by a timer armed
        after every response and cancelled by the next request's first bytes."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._idle_since = self.loop.time()

    # -- the connection ---------------------------------------------------------------------

    def _bounded_open(self, transport: asyncio.Transport) -> bool:
        """Count the connection against its address; False (and closed) past the cap."""
        self._header_bytes = 0
        self._too_many_headers = False
        self._reading_headers = True
        self._ip = None
        self._accepted = False
        self._lingering = False
        self._idle_since = None
        peer = transport.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) and peer else None
        if ip is not None:
            open_now = self.per_ip.get(ip, 0)
            if open_now >= self.limits.max_connections_per_ip:
                log.warning("connection refused: %d already open from %s", open_now, ip)
                transport.abort()
                return False
            self.per_ip[ip] = open_now + 1
            self._ip = ip
        self._accepted = True
        self._since = self.loop.time()  # the first request's headers are due from now
        self.open_connections.add(self)
        if self.sweeper[0] is None:
            self.sweeper[0] = self.loop.call_later(1.0, self._sweep)
        return True

    def _bounded_close(self) -> None:
        self.open_connections.discard(self)
        ip, self._ip = self._ip, None
        if ip is not None:
            left = self.per_ip.get(ip, 0) - 1
            if left > 0:
                self.per_ip[ip] = left
            else:
                self.per_ip.pop(ip, None)

    # -- timeouts -------------------------------------------------------------------------------

    def _sweep(self) -> None:
        """Once a second while the listener has connections: close those past their time."""
        now = self.loop.time()
        for connection in list(self.open_connections):
            connection._check(now)
        self.sweeper[0] = self.loop.call_later(1.0, self._sweep) if self.open_connections else None

    def _check(self, now: float) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        idle = self._idle_since
        if idle is not None:
            if now - idle > self.timeout_keep_alive:
                self._idle_since = None
                transport.close()
            return
        since = self._since
        if since is None:
            return
        if self._reading_headers:
            if now - since > self.limits.header_timeout:
                self._refuse(_CLOSE_408)
            return
        if now - since <= self.limits.body_timeout:
            return
        if self.flow is not None and self.flow.read_paused:  # the app is behind, not the client
            self._since = now
            return
        self._since = None
        log.info("closing a connection: no request body bytes for %.0f s", now - since)
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            self._refuse(_CLOSE_408)
        else:
            transport.close()

    def _refuse_headers(self) -> None:
        self._refuse(_CLOSE_431)

    def _refuse(self, response: bytes) -> None:
        """Send ``response`` and close, lingering: the client may still be sending, and
        closing a socket with unread bytes resets it, losing the response on the way. So the
        write side is shut, what comes for up to ``LINGER`` seconds is dropped unread, then
        the connection is closed (a client that closes first ends it sooner)."""
        self._since = None
        self._lingering = True
        self.open_connections.discard(self)  # the sweep has nothing more to do with it
        transport = self.transport
        transport.write(response)
        try:
            transport.write_eof()
        except (NotImplementedError, OSError, RuntimeError):
            transport.close()
            return
        self.loop.call_later(LINGER, transport.close)


def bounded_protocol(limits: HttpLimits, *, coalescing: bool = True) -> type[HttpToolsProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` enforcing ``limits``, with a per-IP
    connection count of its own (one per listener). Pass ``limit_concurrency=
    limits.max_concurrency`` to the config as well."""
    base = CoalescingHttpToolsProtocol if coalescing else HttpToolsProtocol
    bases = (BoundedMixin, base)
    own = {"limits": limits, "per_ip": {}, "open_connections": set(), "sweeper": [None]}
    protocol = type("BoundedHttpToolsProtocol", bases, own)
    return cast(type[HttpToolsProtocol], protocol)


def http_limits(settings: Any) -> HttpLimits:
    """The limits from :class:`appdeck.settings.Settings`."""
    return HttpLimits(
        max_header_bytes=settings.max_header_bytes,
        max_headers=settings.max_headers,
        header_timeout=settings.header_timeout_seconds,
        body_timeout=settings.body_timeout_seconds,
        max_connections_per_ip=settings.max_connections_per_ip,
        max_concurrency=settings.max_concurrency,
    )
