"""The ingress reverse proxy: a raw ASGI app that forwards ``<app>--<tenant>.localhost`` to
the app (the host's first label is the route key, see :mod:`appdeck.model.hostnames`).

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
- ``Host`` stays the client's (``blog--acme.localhost:8088``), so the app sees the name it is
  reached by (absolute URLs, cookies, virtual hosts); the upstream address is never a header;
- ``X-Forwarded-For`` / ``-Proto`` / ``-Host`` are the ingress's own: the client's address,
  ``http``, the client's ``Host``. Whatever the client sent in them (and in ``Forwarded``) is
  dropped, so an app never trusts a spoofed address, unless ``trust_forwarded`` is on (a
  proxy in front of the ingress): then ``X-Forwarded-For`` is appended to and the other two
  are kept when present;
- response headers except the hop-by-hop ones; the status as the app sent it (1xx interim
  responses are swallowed);
- never a client's ``X-AppDeck-*`` header: those are the ingress's own.

API keys (``keys``, a :class:`KeyGate`): when the resolved route requires a key (the app's spec
says ``api_auth: required``), the request must carry one of the app's live keys
(``X-API-Key`` or ``Authorization: Bearer adk_key_…``): none, unknown, revoked, expired or
another app's gets a 401 page (``WWW-Authenticate: ApiKey``), a read-only key on another
method than GET/HEAD/OPTIONS a 403; neither reaches the app or its counters. An admitted
request goes on without the headers that carried the key and with ``X-AppDeck-Key-Id: <id>``.
Every other route pays one dict lookup for this.

Connections: each upstream instance has a LIFO pool of idle keep-alive connections (closed
after ``pool_idle_timeout``, below the apps' usual keep-alive). A request that finds its pooled
connection closed by the app before any byte of answer goes again on a new connection when it
is idempotent and its body is in hand (what Go's ``http.Transport`` does). A refused connection
is tried once on the release's next instance.

Failures, as small HTML pages (JSON when the client asks for ``application/json``):
404 the host names no app; 503 ``not_deployed`` an app that never had a live release;
503 (``Retry-After``) the app's live release is gone for
now (a recreate in progress, every instance down); 503 ``stopped`` the app was stopped by its
operator (routed to the :data:`~.routes.STOPPED` marker, ``docs/operating.md``); 502 the
upstream refused (after trying the release's next instance once), reset or answered garbage;
504 it did not connect / answer in time; 413 the body is over the limit; 400 no ``Host``.
Only responses for a chosen release are counted (:class:`Counters`), our 502/504 included.
WebSocket upgrades are refused (403) for now.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from appdeck.common.types import Message, Receive, Scope, Send
from appdeck.ingress.challenges import PATH_PREFIX, Challenges
from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.errors import (
    UpstreamError,
    _ClientGone,
    _Closed,
    _ConnectFailed,
    _ConnectTimeout,
    _ShuttingDown,
    _TooLarge,
)
from appdeck.ingress.headers import (
    _chunk,
    _ends_cleanly,
    copy_request_headers,
    drop_connection_listed,
    drop_key_headers,
    forwarded_headers,
    response_headers,
)
from appdeck.ingress.keys import KeyGate, Refusal
from appdeck.ingress.pages import error_page, send_page
from appdeck.ingress.routes import (
    UPSTREAM_HOST,
    Counters,
    ReleaseCounter,
    Resolved,
    RouteTable,
)
from appdeck.ingress.streaming import upload, watch
from appdeck.ingress.upstream import _Connection, _Pool
from appdeck.model import hostnames

__all__ = [
    "IngressProxy",
    "Message",
    "ProxyConfig",
    "Receive",
    "Scope",
    "Send",
    "UpstreamError",
    "error_page",
]

log = logging.getLogger("appdeck.ingress")

_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


# --- the ASGI app --------------------------------------------------------------------------


class IngressProxy:
    """The ASGI app of the ingress router. ``await aclose()`` when done with it."""

    def __init__(
        self,
        routes: RouteTable,
        counters: Counters,
        config: ProxyConfig | None = None,
        *,
        netns: Callable[[str], int | None] | None = None,
        keys: KeyGate | None = None,
        challenges: Challenges | None = None,
    ) -> None:
        self.routes = routes
        self.counters = counters
        self.config = config or ProxyConfig()
        self.netns = netns
        """Names an upstream's network namespace (``<netns>@…``) to an fd of it (owned by
        the runtime), or None when the instance has none (gone, or not started yet)."""
        self.keys = keys
        """The API keys of the routes that require one (None: no route does)."""
        self.challenges = challenges if challenges is not None else Challenges()
        """ACME HTTP-01 answers (``platform/tls`` writes them), served on any host."""
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
            netns, _, address = upstream.rpartition("@")
            host, _, port = address.rpartition(":")
            if host != UPSTREAM_HOST:  # RouteTable validates; never forward anywhere else
                raise _ConnectFailed(f"refusing to forward to {upstream}")
            pool = self._pools[upstream] = _Pool(self, upstream, int(port), netns or None)
        return pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" and scope["path"].startswith(PATH_PREFIX):  # ACME HTTP-01: never an app's
            await self._acme_answer(scope, send)
        elif kind == "http":
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
        (
            host,
            accept,
            length,
            chunked,
            connection,
            forwarded_for,
            forwarded_proto,
            forwarded_host,
        ) = copy_request_headers(scope["headers"], pieces)

        resolved = self.routes.resolve(host)
        if resolved is None:
            await self._miss(host, accept, send)
            return

        if self.keys is not None and resolved.route in self.keys.required:
            keyed = await self._admit(
                resolved.route, method, scope, pieces, connection, accept, send
            )
            if keyed is None:
                return  # refused
            pieces = keyed
        elif connection is not None:
            pieces = drop_connection_listed(pieces, connection)
        pieces += forwarded_headers(
            scope,
            host,
            config.trust_forwarded,
            forwarded_for,
            forwarded_proto,
            forwarded_host,
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
                await send_page(send, 400, "bad_request", "invalid Content-Length", accept)
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
        counter = self.counters.counter(resolved.route, resolved.backend.release_id)
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
        got = await self._request(
            method, receive, send, resolved, counter, head, body, streamed, rechunk, accept, started
        )
        if got is None:
            return  # a page was sent instead, or the client left
        conn, pool, upstream = got
        finished = False
        try:
            finished = await self._respond(
                conn, receive, send, resolved, counter, upstream, started
            )
        finally:
            self._active.discard(conn)
            if finished:
                pool.release(conn)
            else:
                conn.close()

    async def _request(
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
    ) -> tuple[_Connection, _Pool, str] | None:
        """Send the request and wait for the response's headers: to the next instance when
        the first refuses the connection, and again on a fresh connection when a pooled one
        was closed under us (only an idempotent request whose body is still in hand: RFC 9110
        9.2.2, as Go's http.Transport decides). None when a page was sent instead."""
        config = self.config
        upstream, fallback = resolved.upstream, resolved.fallback
        fresh = False
        replayable = not streamed and method in _IDEMPOTENT
        conn: _Connection | None = None
        try:
            while True:
                pool = self._pool(upstream)
                try:
                    conn, reused = (await pool.connect(), False) if fresh else await pool.acquire()
                except (_ConnectFailed, _ConnectTimeout) as exc:
                    if fallback is None:
                        raise
                    log.warning(
                        "ingress: %s; trying %s (app %s, release %s)",
                        exc,
                        fallback,
                        resolved.route,
                        resolved.backend.release_id,
                    )
                    upstream, fallback = fallback, None
                    continue
                self._active.add(conn)
                conn.head = method == "HEAD"
                if streamed:
                    conn.send(head + (_chunk(body, False) if rechunk else body))
                    await upload(conn, receive, len(body), rechunk, config)
                elif len(body) < 65536:
                    conn.send(head + body)
                else:
                    conn.send(head)
                    conn.send(body)
                try:
                    await conn.response(config.response_timeout)
                    return conn, pool, upstream
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
                resolved.route,
                resolved.backend.release_id,
                upstream,
            )
            self._drop(conn)
            await send_page(
                send,
                exc.status,
                exc.code,
                f"app {resolved.route}: {exc}",
                accept,
                app=resolved.route,
                release=resolved.backend.release_id,
            )
        except _TooLarge:
            self._drop(conn)
            await self._too_large(send, accept)
        except _ClientGone:
            self._drop(conn)
        except BaseException:
            self._drop(conn)
            raise
        return None

    def _drop(self, conn: _Connection | None) -> None:
        if conn is not None:
            self._active.discard(conn)
            conn.close()

    async def _respond(
        self,
        conn: _Connection,
        receive: Receive,
        send: Send,
        resolved: Resolved,
        counter: ReleaseCounter,
        upstream: str,
        started: float,
    ) -> bool:
        """Relay the response: its headers, then the body as it comes. True when it went
        through whole (the connection may then be reused)."""
        config = self.config
        status = conn.status
        headers = response_headers(conn.headers, status)
        if config.release_header:
            headers.append((b"x-appdeck-release", resolved.backend.release_id.encode()))
        counter.record(status, time.perf_counter() - started)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        watcher: asyncio.Task[None] | None = None
        try:
            while True:
                if watcher is None and not conn.chunks and not conn.complete:
                    # a body still to come: notice the client leaving meanwhile
                    watcher = asyncio.create_task(watch(receive, conn))
                data, done = await conn.read(config.idle_timeout)
                await send({"type": "http.response.body", "body": data, "more_body": not done})
                if done:
                    return True
        except _ShuttingDown:
            if _ends_cleanly(headers):  # an event stream: the client reconnects later
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                counter.aborted += 1
        except (UpstreamError, _ClientGone) as exc:
            counter.aborted += 1
            if isinstance(exc, UpstreamError):
                log.warning(
                    "ingress: response cut short: %s (app %s, release %s, upstream %s)",
                    exc,
                    resolved.route,
                    resolved.backend.release_id,
                    upstream,
                )
            # the response is left incomplete: the server drops the connection
        finally:
            if watcher is not None:
                watcher.cancel()
        return False

    async def _acme_answer(self, scope: Scope, send: Send) -> None:
        """The key authorization of a pending challenge (``text/plain``), else 404."""
        answer = (
            self.challenges.answer(scope["path"]) if scope["method"] in ("GET", "HEAD") else None
        )
        body = answer.encode() if answer is not None else b"no such challenge\n"
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        await send(
            {"type": "http.response.start", "status": 200 if answer else 404, "headers": headers}
        )
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )

    async def _miss(self, host: bytes, accept: bytes, send: Send) -> None:
        if not host:
            await send_page(send, 400, "bad_request", "the request has no Host header", accept)
            return
        name = self.routes.route_of(host)
        if name is None:
            shown = host.decode("latin-1")
            message = (
                f"no app at host {shown!r}: apps are reached as "
                f"<app>{hostnames.SEPARATOR}<tenant>.{self.routes.domains[0]}"
            )
            await send_page(send, 404, "no_such_app", message, accept, host=shown)
        elif self.routes.stopped(name):
            retry = str(self.config.retry_after).encode()
            message = f"app {name} is stopped: its owner stopped it; it answers again once started"
            await send_page(
                send, 503, "stopped", message, accept, extra=[(b"retry-after", retry)], app=name
            )
        elif name not in self.routes:
            await send_page(send, 404, "no_such_app", f"no app named {name}", accept, app=name)
        elif not self.routes.has_served(name):
            # registered, never live: say so (a 404 sent its agent looking for a wrong name);
            # which <app>--<tenant> names exist is no secret worth a misleading answer
            retry = str(self.config.retry_after).encode()
            message = f"app {name} is not deployed yet: it answers once a release of it is live"
            await send_page(
                send,
                503,
                "not_deployed",
                message,
                accept,
                extra=[(b"retry-after", retry)],
                app=name,
            )
        else:
            self.counters.record_no_release(name)
            retry = str(self.config.retry_after).encode()
            await send_page(
                send,
                503,
                "no_live_release",
                f"app {name} has no live release",
                accept,
                extra=[(b"retry-after", retry)],
                app=name,
            )

    async def _admit(
        self,
        route: str,
        method: str,
        scope: Scope,
        pieces: list[bytes],
        connection: bytes | None,
        accept: bytes,
        send: Send,
    ) -> list[bytes] | None:
        """A route that requires an API key: the request's head without the headers that
        carried the key (nor those ``Connection`` names) and with ``X-AppDeck-Key-Id``; or
        None when it was refused (a 401, 403 or 503 page was sent; not the app's traffic, so
        not counted)."""
        assert self.keys is not None
        admitted = self.keys.check(route, method, scope["headers"])
        if isinstance(admitted, Refusal):
            await self._refuse(route, admitted, accept, send)
            return None
        pieces = drop_key_headers(pieces)
        if connection is not None:
            pieces = drop_connection_listed(pieces, connection)
        # after the Connection-named drop, so that a client cannot drop it
        pieces += (b"x-appdeck-key-id", b": ", admitted, b"\r\n")
        return pieces

    async def _refuse(self, route: str, refusal: Refusal, accept: bytes, send: Send) -> None:
        status, code, message = refusal
        if status == 401:
            extra = [(b"www-authenticate", b"ApiKey")]
        elif status == 503:
            extra = [(b"retry-after", str(self.config.retry_after).encode())]
        else:
            extra = []
        await send_page(send, status, code, f"app {route}: {message}", accept, extra, app=route)

    async def _too_large(self, send: Send, accept: bytes) -> None:
        limit = self.config.max_body_size
        await send_page(
            send,
            413,
            "body_too_large",
            f"the request body is larger than {limit} bytes",
            accept,
            limit=limit,
        )
