"""The upstream client: one asyncio protocol per keep-alive HTTP/1.1 connection to an app
instance (httptools parsing its responses), and a LIFO pool of idle connections per instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from typing import TYPE_CHECKING, cast

import httptools

from appdeck.ingress.errors import (
    UpstreamError,
    _BadResponse,
    _ClientGone,
    _Closed,
    _ConnectFailed,
    _ConnectTimeout,
    _IdleTimeout,
    _ResponseTimeout,
    _StopParsing,
)
from appdeck.ingress.routes import UPSTREAM_HOST
from appdeck.runtime import netns

if TYPE_CHECKING:
    from appdeck.ingress.proxy import IngressProxy

_HIGH_WATER = 256 * 1024
"""Upstream body bytes buffered (the client being slower) before upstream reads pause."""


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

    def __init__(
        self, proxy: IngressProxy, upstream: str, port: int, netns: str | None = None
    ) -> None:
        self.proxy = proxy
        self.upstream = upstream
        self.port = port
        self.netns = netns
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
                if self.netns is None:
                    _, conn = await self.loop.create_connection(
                        lambda: _Connection(self), UPSTREAM_HOST, self.port
                    )
                else:
                    _, conn = await self._connect_in_netns(self.netns)
        except TimeoutError:
            raise _ConnectTimeout(
                f"could not connect to {self.upstream} in {timeout:g} s"
            ) from None
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise _ConnectFailed(f"could not connect to {self.upstream}: {reason}") from None
        return conn

    async def _connect_in_netns(self, name: str) -> tuple[asyncio.BaseTransport, _Connection]:
        """Connect to the instance's own loopback, inside its network namespace."""
        lookup = self.proxy.netns
        fd = lookup(name) if lookup is not None else None
        if fd is None:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "the instance has no network yet")
        sock = netns.socket_in(fd)
        try:
            await self.loop.sock_connect(sock, (UPSTREAM_HOST, self.port))
            return await self.loop.create_connection(lambda: _Connection(self), sock=sock)
        except BaseException:
            sock.close()
            raise

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
