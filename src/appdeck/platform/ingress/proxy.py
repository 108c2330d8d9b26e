"""The ingress reverse proxy: a raw ASGI app that forwards ``<app>.localhost`` to the app.

Per request: the ``Host`` header picks a release and one of its instances
(:meth:`RouteTable.resolve`); the request goes to ``127.0.0.1:<port>`` over a pooled
keep-alive HTTP/1.1 connection; the response comes back as it arrives, chunk by chunk, so
streamed bodies and server-sent events are never buffered.

The upstream client is hand-written (an asyncio protocol per connection, httptools parsing the
responses) rather than httpx: the proxy adds one parse and one write per direction and no
per-request objects beyond a future, which makes it several times cheaper per request than
``httpx.AsyncClient`` (see ``bench/ingress.py``).

What is forwarded, and what is not:

- method, raw path and query, body (streamed: ``Content-Length`` kept, or re-chunked);
- request headers except the hop-by-hop ones (``Connection`` and the headers it names,
  ``Keep-Alive``, ``Proxy-*``, ``TE``, ``Trailer``, ``Transfer-Encoding``, ``Upgrade``) and
  ``Expect`` (the ingress answers ``100-continue`` itself);
- ``Host`` stays the client's (``blog.localhost:8088``), so the app sees the name it is
  reached by (absolute URLs, cookies, virtual hosts); the upstream address is never a header;
- ``X-Forwarded-For`` / ``-Proto`` / ``-Host`` are the ingress's own: the client's address,
  ``http``, the client's ``Host``. Whatever the client sent in them (and in ``Forwarded``) is
  dropped, so an app never trusts a spoofed address, unless ``trust_forwarded`` is on (a
  proxy in front of the ingress): then ``X-Forwarded-For`` is appended to and the other two
  are kept when present;
- response headers except the hop-by-hop ones; the status as the app sent it (1xx interim
  responses are swallowed).

Connections: each upstream instance has a LIFO pool of idle keep-alive connections (closed
after ``pool_idle_timeout``, below the apps' usual keep-alive). A request that finds its pooled
connection closed by the app before any byte of answer goes again on a new connection when it
is idempotent and its body is in hand (what Go's ``http.Transport`` does). A refused connection
is tried once on the release's next instance.

Failures, as small HTML pages (JSON when the client asks for ``application/json``):
404 the host names no app; 503 (``Retry-After``) the app has no live release; 502 the
upstream refused (after trying the release's next instance once), reset or answered garbage;
504 it did not connect / answer in time; 413 the body is over the limit; 400 no ``Host``.
Only responses for a chosen release are counted (:class:`Counters`), our 502/504 included.
WebSocket upgrades are refused (403) for now.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, cast

import httptools
import orjson

from appdeck.platform.ingress.routes import (
    UPSTREAM_HOST,
    Counters,
    ReleaseCounter,
    Resolved,
    RouteTable,
)

log = logging.getLogger("appdeck.ingress")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_HIGH_WATER = 256 * 1024
"""Upstream body bytes buffered (the client being slower) before upstream reads pause."""

# Request headers the proxy never copies as they are; a few are rebuilt below.
_REQUEST_SKIP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"expect",
        b"content-length",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"forwarded",
    }
)
_RESPONSE_SKIP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
_CONNECTION_OPTIONS = frozenset({b"", b"close", b"keep-alive", b"upgrade"})


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Limits and timeouts of the ingress (seconds and bytes)."""

    connect_timeout: float = 2.0
    """Connecting to an upstream instance."""
    response_timeout: float = 30.0
    """From the request being sent to the upstream's response headers."""
    idle_timeout: float = 60.0
    """Between two pieces of a response body (an SSE stream must send something this often),
    and for the upstream to take more of a request body."""
    max_body_size: int = 10 * 1024 * 1024
    """Largest request body forwarded; above it, 413."""
    retry_after: int = 5
    """``Retry-After`` seconds on the 503 page of an app with no live release."""
    max_idle_per_upstream: int = 64
    """Idle keep-alive connections kept per upstream instance."""
    pool_idle_timeout: float = 4.0
    """An idle pooled connection older than this is closed rather than reused (below
    uvicorn's 5 s keep-alive, so the app rarely closes one under us)."""
    trust_forwarded: bool = False
    """A proxy in front of the ingress sets ``X-Forwarded-*``: keep and extend them."""
    release_header: bool = False
    """Add ``X-AppDeck-Release: <release id>`` to proxied responses."""


# --- upstream errors -----------------------------------------------------------------------


class UpstreamError(Exception):
    """The upstream could not give a (whole) response; ``status`` is what the client gets."""

    status = 502
    code = "upstream_unavailable"


class _ConnectFailed(UpstreamError):
    pass


class _ConnectTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class _ResponseTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class _IdleTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class _Closed(UpstreamError):
    pass


class _ShuttingDown(UpstreamError):
    status = 503
    code = "shutting_down"


class _BadResponse(UpstreamError):
    pass


class _ClientGone(Exception):
    pass


class _TooLarge(Exception):
    pass


class _StopParsing(Exception):
    """Raised from a parser callback to stop at the end of the response (HEAD)."""


def _chunk(data: bytes, last: bool) -> bytes:
    """``data`` in chunked transfer coding (and the terminating chunk when ``last``)."""
    out = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
    return out + b"0\r\n\r\n" if last else out


def _ends_cleanly(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a response may be ended early without the client taking it for complete
    data: a server-sent event stream (no Content-Length) is, a download is not."""
    event_stream = False
    for name, value in headers:
        if name == b"content-length":
            return False
        if name == b"content-type" and value.lower().startswith(b"text/event-stream"):
            event_stream = True
    return event_stream


async def _watch(receive: Receive, conn: _Connection) -> None:
    """Wait for the client to disconnect while a response body streams."""
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                conn.client_gone()
                return
    except Exception:  # a server-side failure reads as the client gone
        log.debug("ingress: receive failed while streaming", exc_info=True)
        conn.client_gone()


def _expire(waiter: asyncio.Future[None], error: type[UpstreamError], message: str) -> None:
    if not waiter.done():
        waiter.set_exception(error(message))


# --- one upstream connection ---------------------------------------------------------------


class _Connection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection to one upstream; one exchange at a time."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.in_use = True
        self.idle_since = 0.0
        self.write_paused = False
        self._drain: asyncio.Future[None] | None = None
        self._prepare()

    def _prepare(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.reusable = True
        self.error: BaseException | None = None
        self.received = False
        self.head = False
        self.interim = False
        self.stopped = False
        self.reading_paused = False
        self.waiter: asyncio.Future[None] | None = None

    # protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        if not self.in_use or self.complete:
            # bytes nobody asked for: the connection can no longer be trusted
            self.reusable = False
            self.close()
            return
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if self.stopped:  # on purpose: a HEAD response, or bytes after the end
                self.stopped = False
                self.parser = httptools.HttpResponseParser(self)
                if not self.reusable:
                    self.close()
                return
            self._fail(_BadResponse(f"upstream response could not be handled: {exc}"))
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(_BadResponse(f"invalid HTTP response from the upstream: {exc}"))

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.in_use and not self.complete and self.error is None:
            if self.headers_done and self._ends_at_eof():
                self.complete = True
                self.keep_alive = False
            else:
                reason = f": {exc}" if exc else ""
                self.error = _Closed(f"the upstream closed the connection{reason}")
        self._wake()
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)
        if not self.in_use:
            self.pool.discard(self)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # parser callbacks

    def on_message_begin(self) -> None:
        if self.complete:  # a second response to one request: never trust this connection
            self.reusable = False
            self.stopped = True
            raise _StopParsing
        self.headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 100 Continue, 103 Early Hints: not the response
            self.interim = True
            return
        self.status = status
        self.headers_done = True
        if self.head:  # llhttp cannot be told that a HEAD response has no body
            self.complete = True
            self.keep_alive = self.parser.should_keep_alive()
            self._wake()
            self.stopped = True
            raise _StopParsing
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered >= _HIGH_WATER and not self.reading_paused and self.transport:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    # helpers

    def _ends_at_eof(self) -> bool:
        """Whether the response's body is delimited by the connection closing."""
        if self.status in (204, 304):
            return True
        for name, value in self.headers:
            lower = name.lower()
            if lower == b"content-length" or (
                lower == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                return False
        return True

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        self.reusable = False
        self._wake()
        self.close()

    def client_gone(self) -> None:
        """The client disconnected: end whatever wait the proxy is in."""
        if self.error is None:
            self.error = _ClientGone()
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(_ClientGone())

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    async def _wait(self, deadline: float, error: type[UpstreamError], message: str) -> None:
        waiter = self.loop.create_future()
        self.waiter = waiter
        timer = self.loop.call_at(deadline, _expire, waiter, error, message)
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiter = None

    # the proxy's side

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    async def drain(self, within: float) -> None:
        deadline = self.loop.time() + within
        while self.write_paused and not self.closed:
            drain = self._drain = self.loop.create_future()
            timer = self.loop.call_at(
                deadline, _expire, drain, _IdleTimeout, "the upstream stopped reading the body"
            )
            try:
                await drain
            finally:
                timer.cancel()

    async def response(self, within: float) -> None:
        """Wait for the response headers (raises an :class:`UpstreamError`)."""
        if self.headers_done:
            return
        deadline = self.loop.time() + within
        while not self.headers_done:
            if self.error is not None:
                raise self.error
            await self._wait(
                deadline, _ResponseTimeout, f"no response from the upstream in {within:g} s"
            )

    async def read(self, idle_timeout: float) -> tuple[bytes, bool]:
        """The body received since the last call, and whether the body is complete."""
        while not self.chunks and not self.complete:
            if self.error is not None:
                raise self.error
            await self._wait(
                self.loop.time() + idle_timeout,
                _IdleTimeout,
                f"the upstream sent nothing for {idle_timeout:g} s",
            )
        return self.take()

    def take(self) -> tuple[bytes, bool]:
        chunks = self.chunks
        if not chunks:
            data = b""
        elif len(chunks) == 1:
            data = chunks[0]
            self.chunks = []
        else:
            data = b"".join(chunks)
            self.chunks = []
        self.buffered = 0
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()
        return data, self.complete


# --- the pool ------------------------------------------------------------------------------


class _Pool:
    """Idle keep-alive connections to one upstream instance (LIFO: the warmest first)."""

    def __init__(self, proxy: IngressProxy, upstream: str, port: int) -> None:
        self.proxy = proxy
        self.upstream = upstream
        self.port = port
        self.loop = asyncio.get_running_loop()
        self.idle: list[_Connection] = []
        self.config = proxy.config

    async def acquire(self) -> tuple[_Connection, bool]:
        """A connection for one exchange, and whether it was reused."""
        idle = self.idle
        if idle:
            now = self.loop.time()
            limit = self.config.pool_idle_timeout
            while idle:
                conn = idle.pop()
                if conn.closed:
                    continue
                if now - conn.idle_since > limit:
                    conn.in_use = True  # so that connection_lost does not look it up
                    conn.close()
                    continue
                conn.in_use = True
                return conn, True
        return await self.connect(), False

    async def connect(self) -> _Connection:
        timeout = self.config.connect_timeout
        try:
            async with asyncio.timeout(timeout):
                _, conn = await self.loop.create_connection(
                    lambda: _Connection(self), UPSTREAM_HOST, self.port
                )
        except TimeoutError:
            raise _ConnectTimeout(
                f"could not connect to {self.upstream} in {timeout:g} s"
            ) from None
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise _ConnectFailed(f"could not connect to {self.upstream}: {reason}") from None
        return conn

    def release(self, conn: _Connection) -> None:
        """Back to the pool after a whole exchange, or closed when it cannot be reused."""
        if (
            conn.closed
            or not conn.keep_alive
            or not conn.reusable
            or conn.error is not None
            or len(self.idle) >= self.config.max_idle_per_upstream
            or self.proxy.closing
            or self.proxy._pools.setdefault(self.upstream, self) is not self
        ):
            conn.close()
            return
        conn._prepare()
        conn.in_use = False
        conn.idle_since = self.loop.time()
        self.idle.append(conn)

    def discard(self, conn: _Connection) -> None:
        """An idle connection closed (the app's keep-alive timeout): forget it."""
        with contextlib.suppress(ValueError):
            self.idle.remove(conn)

    def close(self) -> None:
        idle, self.idle = self.idle, []
        for conn in idle:
            conn.in_use = True
            conn.close()


# --- pages ---------------------------------------------------------------------------------

_TITLES = {
    400: "Bad request",
    404: "No such app",
    413: "Request body too large",
    502: "Bad gateway",
    503: "No live release",
    504: "Gateway timeout",
}

_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;"
    "color:#222}h1{font-size:1.4em}small{color:#777}"
)


def error_page(
    status: int, code: str, message: str, accept: bytes, **details: Any
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of an ingress error page: HTML, or JSON when the client asks."""
    if b"json" in accept and b"text/html" not in accept:
        body = orjson.dumps(
            {"error": {"status": status, "code": code, "message": message, **details}}
        )
        content_type = b"application/json"
    else:
        title = _TITLES.get(status, "Error")
        body = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{status} {title}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{status} · {title}</h1><p>{html.escape(message)}</p>"
            f"<p><small>AppDeck ingress · {code}</small></p></body></html>\n"
        ).encode()
        content_type = b"text/html; charset=utf-8"
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    return headers, body


# --- the ASGI app --------------------------------------------------------------------------


class IngressProxy:
    """The ASGI app of the ingress router. ``await aclose()`` when done with it."""

    def __init__(
        self, routes: RouteTable, counters: Counters, config: ProxyConfig | None = None
    ) -> None:
        self.routes = routes
        self.counters = counters
        self.config = config or ProxyConfig()
        self.closing = False
        self.inflight = 0
        """Requests being handled right now."""
        self._pools: dict[str, _Pool] = {}
        self._active: set[_Connection] = set()

    async def aclose(self) -> None:
        """Close every upstream connection, idle or busy: a response still streaming is cut
        short (an event stream is ended cleanly instead, so its client reconnects)."""
        self.closing = True
        for pool in list(self._pools.values()):
            pool.close()
        self._pools.clear()
        for conn in list(self._active):
            conn._fail(_ShuttingDown("the ingress is shutting down"))

    def _pool(self, upstream: str) -> _Pool:
        pool = self._pools.get(upstream)
        if pool is None:
            if len(self._pools) >= 256:  # forget instances long gone (their pools are empty)
                for key in [k for k, p in self._pools.items() if not p.idle]:
                    del self._pools[key]
            host, _, port = upstream.rpartition(":")
            if host != UPSTREAM_HOST:  # RouteTable validates; never forward anywhere else
                raise _ConnectFailed(f"refusing to forward to {upstream}")
            pool = self._pools[upstream] = _Pool(self, upstream, int(port))
        return pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            self.inflight += 1
            try:
                await self._http(scope, receive, send)
            finally:
                self.inflight -= 1
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        config = self.config
        method: str = scope["method"]
        target: bytes = scope.get("raw_path") or scope["path"].encode()
        query: bytes = scope["query_string"]
        if query:
            target = target + b"?" + query
        pieces = [method.encode(), b" ", target, b" HTTP/1.1\r\n"]
        host = b""
        accept = b""
        length: bytes | None = None
        chunked = False
        connection: bytes | None = None
        forwarded_for = forwarded_proto = forwarded_host = b""
        for name, value in scope["headers"]:
            if name in _REQUEST_SKIP:
                if name == b"content-length":
                    length = value
                elif name == b"transfer-encoding":
                    chunked = True
                elif name == b"connection":
                    connection = value
                elif name == b"x-forwarded-for":
                    forwarded_for = value
                elif name == b"x-forwarded-proto":
                    forwarded_proto = value
                elif name == b"x-forwarded-host":
                    forwarded_host = value
                continue
            if name == b"host":
                if host:
                    continue  # one Host only
                host = value
            elif name == b"accept":
                accept = value
            pieces += (name, b": ", value, b"\r\n")

        resolved = self.routes.resolve(host)
        if resolved is None:
            await self._miss(host, accept, send)
            return

        if connection is not None:
            drop = {t.strip().lower() for t in connection.split(b",")} - _CONNECTION_OPTIONS
            if drop:
                kept = pieces[:4]
                for i in range(4, len(pieces), 4):
                    if pieces[i] not in drop:
                        kept += pieces[i : i + 4]
                pieces = kept

        client = scope.get("client")
        address = client[0].encode() if client else b""
        if config.trust_forwarded:
            if forwarded_for:
                address = forwarded_for + b", " + address
            proto = forwarded_proto or scope["scheme"].encode()
            original_host = forwarded_host or host
        else:
            proto = scope["scheme"].encode()
            original_host = host
        pieces += (
            b"x-forwarded-for: ",
            address,
            b"\r\nx-forwarded-proto: ",
            proto,
            b"\r\nx-forwarded-host: ",
            original_host,
            b"\r\n",
        )

        # the body: none, whole (one receive), or streamed
        body = b""
        streamed = False
        declared = 0
        limit = config.max_body_size
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await self._page(send, 400, "bad_request", "invalid Content-Length", accept)
                return
            if declared > limit:
                await self._too_large(send, accept)
                return
            has_body = declared > 0
        else:
            has_body = chunked
        if has_body:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            body = message.get("body", b"")
            if message.get("more_body", False):
                streamed = True
            elif len(body) > limit:
                await self._too_large(send, accept)
                return
        if streamed and length is None:
            pieces.append(b"transfer-encoding: chunked\r\n\r\n")
        elif streamed or body or length is not None:
            pieces += (b"content-length: ", str(declared if streamed else len(body)).encode())
            pieces.append(b"\r\n\r\n")
        else:
            pieces.append(b"\r\n")
        counter = self.counters.counter(resolved.app_name, resolved.backend.release_id)
        await self._forward(
            method,
            receive,
            send,
            resolved,
            counter,
            b"".join(pieces),
            body,
            streamed,
            length is None,
            accept,
            started,
        )

    async def _forward(
        self,
        method: str,
        receive: Receive,
        send: Send,
        resolved: Resolved,
        counter: ReleaseCounter,
        head: bytes,
        body: bytes,
        streamed: bool,
        rechunk: bool,
        accept: bytes,
        started: float,
    ) -> None:
        config = self.config
        upstream = resolved.upstream
        fallback = resolved.fallback
        fresh = False
        # the request may go again when a pooled connection turns out closed: idempotent
        # (RFC 9110 9.2.2) and its body still in hand (as Go's http.Transport decides)
        replayable = not streamed and method in _IDEMPOTENT
        conn: _Connection | None = None
        pool: _Pool | None = None
        finished = False
        watcher: asyncio.Task[None] | None = None
        try:
            # 1. send the request; wait for the response headers
            try:
                while True:
                    pool = self._pool(upstream)
                    try:
                        if fresh:
                            conn, reused = await pool.connect(), False
                        else:
                            conn, reused = await pool.acquire()
                    except (_ConnectFailed, _ConnectTimeout) as exc:
                        if fallback is None:
                            raise
                        log.warning(
                            "ingress: %s; trying %s (app %s, release %s)",
                            exc,
                            fallback,
                            resolved.app_name,
                            resolved.backend.release_id,
                        )
                        upstream, fallback = fallback, None
                        continue
                    self._active.add(conn)
                    conn.head = method == "HEAD"
                    if streamed:
                        conn.send(head + (_chunk(body, False) if rechunk else body))
                        await self._upload(conn, receive, len(body), rechunk)
                    elif len(body) < 65536:
                        conn.send(head + body)
                    else:
                        conn.send(head)
                        conn.send(body)
                    try:
                        await conn.response(config.response_timeout)
                        break
                    except _Closed:
                        if not reused or conn.received or not replayable:
                            raise
                        # a pooled connection the app closed as we sent: again, on a new one
                        self._active.discard(conn)
                        conn.close()
                        conn = None
                        fresh = True
            except UpstreamError as exc:
                counter.record(exc.status, time.perf_counter() - started, True)
                log.warning(
                    "ingress: %s (app %s, release %s, upstream %s)",
                    exc,
                    resolved.app_name,
                    resolved.backend.release_id,
                    upstream,
                )
                await self._page(
                    send,
                    exc.status,
                    exc.code,
                    f"app {resolved.app_name}: {exc}",
                    accept,
                    app=resolved.app_name,
                    release=resolved.backend.release_id,
                )
                return
            except _TooLarge:
                await self._too_large(send, accept)
                return
            except _ClientGone:
                return

            # 2. the response: headers, then the body as it comes
            assert conn is not None
            status = conn.status
            headers: list[tuple[bytes, bytes]] = []
            drop: set[bytes] | None = None
            for name, value in conn.headers:
                lower = name.lower()
                if lower in _RESPONSE_SKIP:
                    if lower == b"connection":
                        drop = {t.strip().lower() for t in value.split(b",")}
                    continue
                headers.append((lower, value))
            if status in (204, 304):  # no body, whatever length the app announced
                drop = (drop or set()) | {b"content-length"}
            if drop:
                headers = [(n, v) for n, v in headers if n not in drop]
            if config.release_header:
                headers.append((b"x-appdeck-release", resolved.backend.release_id.encode()))
            counter.record(status, time.perf_counter() - started)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            try:
                while True:
                    if watcher is None and not conn.chunks and not conn.complete:
                        # a body still to come: notice the client leaving meanwhile
                        watcher = asyncio.create_task(_watch(receive, conn))
                    data, done = await conn.read(config.idle_timeout)
                    await send({"type": "http.response.body", "body": data, "more_body": not done})
                    if done:
                        break
            except _ShuttingDown:
                if _ends_cleanly(headers):  # an event stream: the client reconnects later
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                else:
                    counter.aborted += 1
                return
            except (UpstreamError, _ClientGone) as exc:
                counter.aborted += 1
                if isinstance(exc, UpstreamError):
                    log.warning(
                        "ingress: response cut short: %s (app %s, release %s, upstream %s)",
                        exc,
                        resolved.app_name,
                        resolved.backend.release_id,
                        upstream,
                    )
                return  # the response is left incomplete: the server drops the connection
            finished = True
        finally:
            if watcher is not None:
                watcher.cancel()
            if conn is not None:
                self._active.discard(conn)
                if finished and pool is not None:
                    pool.release(conn)
                else:
                    conn.close()

    async def _upload(self, conn: _Connection, receive: Receive, sent: int, rechunk: bool) -> None:
        """Stream the rest of the request body to the upstream as the client sends it."""
        config = self.config
        limit = config.max_body_size
        while True:
            if conn.headers_done or conn.error is not None:
                conn.reusable = False  # it answered before the whole body: do not reuse
                return
            if conn.write_paused:
                await conn.drain(config.idle_timeout)
            try:
                async with asyncio.timeout(config.idle_timeout):
                    message = await receive()
            except TimeoutError:
                raise _ClientGone from None
            if message["type"] != "http.request":
                raise _ClientGone
            data: bytes = message.get("body", b"")
            more: bool = message.get("more_body", False)
            sent += len(data)
            if sent > limit:
                raise _TooLarge
            out = _chunk(data, not more) if rechunk else data
            if out:
                conn.send(out)
            if not more:
                return

    async def _miss(self, host: bytes, accept: bytes, send: Send) -> None:
        if not host:
            await self._page(send, 400, "bad_request", "the request has no Host header", accept)
            return
        name = self.routes.app_name(host)
        if name is None:
            shown = host.decode("latin-1")
            message = (
                f"no app at host {shown!r}: apps are reached as <app>.{self.routes.domains[0]}"
            )
            await self._page(send, 404, "no_such_app", message, accept, host=shown)
        elif name not in self.routes:
            await self._page(send, 404, "no_such_app", f"no app named {name}", accept, app=name)
        else:
            self.counters.record_no_release(name)
            retry = str(self.config.retry_after).encode()
            await self._page(
                send,
                503,
                "no_live_release",
                f"app {name} has no live release",
                accept,
                extra=[(b"retry-after", retry)],
                app=name,
            )

    async def _too_large(self, send: Send, accept: bytes) -> None:
        limit = self.config.max_body_size
        await self._page(
            send,
            413,
            "body_too_large",
            f"the request body is larger than {limit} bytes",
            accept,
            limit=limit,
        )

    async def _page(
        self,
        send: Send,
        status: int,
        code: str,
        message: str,
        accept: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
        **details: Any,
    ) -> None:
        headers, body = error_page(status, code, message, accept, **details)
        if extra:
            headers += extra
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
