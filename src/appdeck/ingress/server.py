"""The ingress router's own listener: uvicorn (httptools) serving :class:`IngressProxy`
in-process, on a socket of its own (``127.0.0.1:8088`` by default, and ``[::1]`` on the same
port: :mod:`appdeck.common.listen`; port 0 picks one)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from appdeck.common.listen import listen
from appdeck.ingress.certs import Certificates
from appdeck.ingress.proxy import IngressProxy, ProxyConfig
from appdeck.ingress.routes import Counters, RouteTable

log = logging.getLogger("appdeck.ingress")


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers alone (its host owns them)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class IngressServer:
    """Run the ingress router: ``port = await server.start()`` … ``await server.stop()``.

    ``graceful_shutdown`` is how long :meth:`stop` lets in-flight responses (streams
    included) finish before cutting them.
    """

    def __init__(
        self,
        routes: RouteTable,
        counters: Counters,
        host: str = "127.0.0.1",
        port: int = 8088,
        *,
        config: ProxyConfig | None = None,
        graceful_shutdown: float = 5.0,
        keep_alive: float = 15.0,
        http: type[asyncio.Protocol] | str = "httptools",
        limit_concurrency: int | None = None,
    ) -> None:
        self.routes = routes
        self.counters = counters
        self.host = host
        self.port = port
        self.proxy = IngressProxy(routes, counters, config)
        self.certificates = Certificates()
        """The certificates the data plane serves by SNI (``platform/tls`` writes them; this
        listener is plain HTTP: the HAProxy driver mirrors them)."""
        self.challenges = self.proxy.challenges
        """The ACME HTTP-01 answers this listener serves (``platform/tls`` writes them)."""
        self.graceful_shutdown = graceful_shutdown
        self.keep_alive = keep_alive
        self.http = http
        """uvicorn's protocol: the composition root passes the bounded one
        (``transport.http11.bounded_protocol``: header limits, read timeouts, per-IP cap)."""
        self.limit_concurrency = limit_concurrency
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._sockets: list[socket.socket] = []

    def url_for(self, route: str) -> str:
        """The URL a route key (an app's: :func:`appdeck.model.hostnames.route_label`) is
        reached at through this router."""
        return f"http://{route}.{self.routes.domains[0]}:{self.port}"

    async def start(self) -> int:
        """Listen and serve; the actual port (useful when ``port`` was 0)."""
        if self._task is not None:
            raise RuntimeError("the ingress server is already running")
        # a loopback host is held on 127.0.0.1 and [::1] both (no app can sit on the other)
        socks = listen(self.host, self.port)
        for sock in socks:
            sock.setblocking(False)
        self._sockets = socks
        self.port = socks[0].getsockname()[1]
        self.proxy.closing = False
        config = uvicorn.Config(
            self.proxy,
            interface="asgi3",
            http=self.http,
            limit_concurrency=self.limit_concurrency,
            ws="auto",  # upgrades reach the proxy, which refuses them (403)
            lifespan="off",
            access_log=False,
            log_config=None,
            server_header=False,
            date_header=False,  # the app's own Date passes through
            proxy_headers=False,
            timeout_keep_alive=int(self.keep_alive),
            # stop() ends what is left itself, before uvicorn would cancel it
            timeout_graceful_shutdown=round(self.graceful_shutdown) + 3,
            backlog=2048,
        )
        server = self._server = _EmbeddedServer(config)
        task = self._task = asyncio.create_task(server.serve(sockets=socks))
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    self._task = None
                    _close(socks)
                    task.result()  # raises what stopped it
                    raise RuntimeError("the ingress server stopped while starting")
                await asyncio.sleep(0.002)
        log.info("ingress router listening on http://%s:%d", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        """Stop listening; let in-flight responses finish for up to ``graceful_shutdown``
        seconds, then cut what is left (event streams end cleanly) and close every upstream
        connection. Safe to call twice."""
        server, task, socks = self._server, self._task, self._sockets
        self._server = self._task = None
        self._sockets = []
        if server is None or task is None:
            return
        loop = asyncio.get_running_loop()
        server.should_exit = True  # uvicorn closes the listener and idle connections
        deadline = loop.time() + self.graceful_shutdown
        while self.proxy.inflight and loop.time() < deadline:  # noqa: ASYNC110 - bounded
            await asyncio.sleep(0.02)
        await self.proxy.aclose()
        try:
            async with asyncio.timeout(5):
                await asyncio.shield(task)
        except TimeoutError:
            server.force_exit = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            _close(socks)
        # handlers cut short unwind now
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                while self.proxy.inflight:  # noqa: ASYNC110 - a bounded poll of a counter
                    await asyncio.sleep(0.01)


def _close(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()
