"""Instructions per ``tools/call`` through the whole server stack, for before/after counts that
hold on a loaded machine (issue 26 §1).

The server is built as ``bench/appdeck_server.py`` builds it (``Services.start``, bearer auth,
the rate limit raised but checked, the audit log, an ``echo`` tool) and served by the protocol
class ``appdeck serve`` uses (uvicorn's httptools protocol with AppDeck's limits and coalesced
writes), over an in-memory transport: each request's bytes go to ``data_received`` as a socket
would hand them, and the response is awaited from the transport's ``writelines``. No socket,
no load generator: what is counted is the server's own work, HTTP parsing included.

Under callgrind the measured loop alone is counted: it runs inside ``sys.call_tracing`` (a C
function nothing else calls), which ``--toggle-collect`` names. Collection is per thread: the
event loop's thread is counted, the audit writer's thread is not. Instructions per call are the
run's total over ``-n`` :

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=sys_call_tracing \
        --callgrind-out-file=/tmp/cg.out .venv/bin/python \
        bench/callpath_cost.py -n 2000
    callgrind_annotate /tmp/cg.out | head -30     # "PROGRAM TOTALS" / 2000

Natively it prints the CPU time per call too (noisy on a shared machine).
``--era 2026`` sends the 2026-07-28 requests (no session, ``_meta``, routing headers).
``--log-level info`` logs as ``appdeck serve`` does by default (an activity line per tools/call,
written to ``/dev/null`` as to a pipe, or to the file ``CALLPATH_LOG`` names); the default
``warning`` is ``bench/run.py``'s setting.

``--server sdk`` counts the reference instead: ``bench/sdk_server.py``'s app (the official SDK's
low-level ``Server``, Streamable HTTP in JSON mode, a session), behind uvicorn's own httptools
protocol as ``sdk_server.py`` serves it, on the same transport and the same loop: the two
servers' counts side by side, without the socket, the load generator or this machine's drift
(``bench/run.py``'s ratio is over sockets, with all of those).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvicorn
from appdeck_server import ECHO_SCHEMA, echo, mint_dev_token
from uvicorn.server import ServerState

from appdeck.app import Services
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from appdeck.transport.http11 import bounded_protocol, http_limits
from appdeck.tuning import tune_gc

_META = (
    b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    b'"io.modelcontextprotocol/clientCapabilities":{}}'
)


class MemoryTransport(asyncio.Transport):
    """What the protocol writes, kept; a future resolved at each write."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.wrote: asyncio.Future[None] | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writelines([bytes(data)])

    def writelines(self, list_of_data: Any) -> None:
        self.written.extend(list_of_data)
        if self.wrote is not None and not self.wrote.done():
            self.wrote.set_result(None)

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        return None


def request(era: str, token: str, session: bytes, i: int) -> bytes:
    if era == "2026":
        body = (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
            b'"arguments":{"text":"hello"},' % i + _META + b"}}"
        )
        mcp = b"mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: echo\r\n"
    else:
        body = (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call",'
            b'"params":{"name":"echo","arguments":{"text":"hello"}}}' % i
        )
        mcp = b"mcp-protocol-version: 2025-11-25\r\nmcp-session-id: " + session + b"\r\n"
    return (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:8080\r\ncontent-type: application/json\r\n"
        b"accept: application/json, text/event-stream\r\nauthorization: Bearer "
        + token.encode()
        + b"\r\n"
        + mcp
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


_INIT = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":'
    b'{"protocolVersion":"2025-11-25","capabilities":{},'
    b'"clientInfo":{"name":"bench","version":"1"}}}'
)


def _post(body: bytes, headers: bytes = b"") -> bytes:
    return (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:8080\r\ncontent-type: application/json\r\n"
        b"accept: application/json, text/event-stream\r\n"
        + headers
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


_SDK_LIFESPAN: list[asyncio.Task[None]] = []
"""The task the reference server's lifespan runs in for the whole run (its session manager's
task group must be left in the task that entered it)."""


async def setup_sdk() -> tuple[Poster, list[bytes]]:
    """The reference server (``sdk_server.build_app``, its lifespan running) behind uvicorn's
    httptools protocol on a :class:`MemoryTransport`, a session initialized, and the measured
    requests' bytes (after a warm-up of 500 calls)."""
    import sdk_server

    app: Any = sdk_server.build_app()
    ready = asyncio.Event()

    async def lifespan() -> None:
        async with app.router.lifespan_context(app):
            ready.set()
            await asyncio.Event().wait()

    _SDK_LIFESPAN.append(asyncio.get_running_loop().create_task(lifespan()))
    await ready.wait()
    poster = memory_poster(app)
    head = (await poster.post(_post(_INIT))).split(b"\r\n\r\n", 1)[0]
    session = next(
        line.split(b":", 1)[1].strip()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"mcp-session-id:")
    )
    headers = b"mcp-protocol-version: 2025-11-25\r\nmcp-session-id: " + session + b"\r\n"
    await poster.post(_post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', headers))

    def call(i: int) -> bytes:
        body = (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call",'
            b'"params":{"name":"echo","arguments":{"text":"hello"}}}' % i
        )
        return _post(body, headers)

    for i in range(500):
        answer = await poster.post(call(100_000 + i))
        assert b" 200 OK" in answer, answer
        assert b'"result"' in answer, answer
    return poster, [call(i) for i in range(1, 100_000)]


async def setup(era: str, auth: str = "bearer") -> tuple[Services, Any, list[bytes]]:
    """The server, its protocol on a :class:`MemoryTransport`, and the measured requests'
    bytes (after a warm-up of 500 calls)."""
    data_dir = Path(tempfile.mkdtemp(prefix="appdeck-callpath-"))
    settings = Settings(
        data_dir=data_dir,
        log_level="warning",
        rate_limit_per_second=1e9,
        rate_limit_burst=10**9,
        stateless_era=True,
        ingress_port=0,
        # what the store said is trusted for the whole run: its re-reads are per second of
        # wall time, which callgrind stretches fifty-fold, not per call
        auth_trust_seconds=3600,
    )
    if auth == "anonymous":  # as bench/appdeck_server.py --auth anonymous (the same token sent)
        from appdeck.auth import AllowAnonymous

        services = await Services.start(settings, authenticator=AllowAnonymous(), port=8080)
    else:
        services = await Services.start(settings, port=8080)
    services.registry.tools.clear()
    services.registry.add_tool(ToolDef("echo", "Echo the given text", ECHO_SCHEMA, echo))
    token = await mint_dev_token(services)
    tune_gc()  # after start-up, as appdeck serve does
    poster = memory_poster(services.asgi(), settings)
    session = b""
    if era == "2025":
        init = _INIT
        raw = (
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:8080\r\ncontent-type: application/json\r\n"
            b"accept: application/json, text/event-stream\r\nauthorization: Bearer "
            + token.encode()
            + b"\r\ncontent-length: %d\r\n\r\n" % len(init)
            + init
        )
        head = (await poster.post(raw)).split(b"\r\n\r\n", 1)[0]
        session = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"mcp-session-id:")
        )
    for i in range(500):  # warm-up: caches, the audit writer, the allocator
        answer = await poster.post(request(era, token, session, 100_000 + i))
        assert b" 200 OK" in answer, answer
        assert b'"result"' in answer, answer
    return services, poster, [request(era, token, session, i) for i in range(1, 100_000)]


def memory_poster(app: Any, settings: Settings | None = None) -> Poster:
    """``app`` behind the protocol class ``appdeck serve`` uses (``settings``' limits) or, with
    no settings, uvicorn's own httptools protocol (as ``sdk_server.py`` serves the reference),
    on a :class:`MemoryTransport`."""
    config = uvicorn.Config(
        app,
        http=bounded_protocol(http_limits(settings)) if settings is not None else "httptools",
        loop="none",
        lifespan="off",
        access_log=False,
        log_config=None,
        server_header=False,
        proxy_headers=False,
    )
    config.load()
    protocol = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=ServerState(), app_state={}
    )
    transport = MemoryTransport()
    protocol.connection_made(transport)
    return Poster(protocol, transport)


class Poster:
    def __init__(self, protocol: Any, transport: MemoryTransport) -> None:
        self.protocol = protocol
        self.transport = transport

    async def post(self, raw: bytes) -> bytes:
        transport = self.transport
        transport.written.clear()
        loop = asyncio.get_running_loop()
        transport.wrote = loop.create_future()
        # from the loop, outside any task, as a socket's bytes come
        loop.call_soon(self.protocol.data_received, raw)
        await transport.wrote
        return b"".join(transport.written)


async def measure(poster: Poster, bodies: list[bytes]) -> None:
    for raw in bodies:
        await poster.post(raw)


def pause_background(services: Services) -> list[str]:
    """End ``Services``' periodic loops (sweeps, health, task and deploy watches) as at
    shutdown, between writes, for the measurement: their work is per second, not per call,
    and callgrind puts fifty times fewer calls in a second. (The data plane's, the API keys',
    the repository poller's and the edge mirror's polls go on: they are not ended apart from
    ``Services.stop``.)"""
    services._stopping.set()
    return sorted(task.get_name() for task in services._background)


def quiet_server(era: str) -> tuple[asyncio.AbstractEventLoop, Services, Poster, list[bytes]]:
    """A uvloop loop set as the current one, the warmed-up server on it (:func:`setup`) with its
    background loops ended (:func:`pause_background`), its poster and the requests' bytes."""
    import uvloop

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    services, poster, bodies = loop.run_until_complete(setup(era))
    pause_background(services)
    loop.run_until_complete(asyncio.sleep(0.1))  # the cancelled loops unwind
    return loop, services, poster, bodies


def measured(loop: asyncio.AbstractEventLoop, poster: Poster, bodies: list[bytes], n: int) -> float:
    """CPU seconds (every thread) of ``n`` calls, run inside ``sys.call_tracing`` (what
    callgrind's ``--toggle-collect`` names); the call after them must be answered."""
    cpu = time.process_time()
    sys.call_tracing(loop.run_until_complete, (measure(poster, bodies[:n]),))
    used = time.process_time() - cpu
    last = loop.run_until_complete(poster.post(bodies[n]))
    assert b" 200 OK" in last, last
    assert b'"result"' in last, last
    return used


def main_sdk(n: int) -> None:
    """:func:`main` for the reference server (``--server sdk``)."""
    import uvloop

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    poster, bodies = loop.run_until_complete(setup_sdk())
    used = measured(loop, poster, bodies, n)
    print(f"sdk: {n} tools/call, {used / n * 1e6:.1f} µs CPU each (all threads)")
    for task in _SDK_LIFESPAN:
        task.cancel()
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


def main(n: int, era: str, auth: str = "bearer", log_level: str = "warning") -> None:
    """Setup and the measured loop in separate ``run_until_complete`` calls: the measured one
    runs inside ``sys.call_tracing``, the C function callgrind's ``--toggle-collect`` names."""
    import uvloop

    if log_level != "warning":
        from appdeck import logs

        logs.configure(log_level, "console")
        for handler in logging.getLogger().handlers:  # as to a pipe, unread
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(open(os.environ.get("CALLPATH_LOG", os.devnull), "w"))  # noqa: SIM115 (the process's life)

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    services, poster, bodies = loop.run_until_complete(setup(era, auth))
    paused = pause_background(services)
    loop.run_until_complete(asyncio.sleep(0.1))  # the cancelled loops unwind
    used = measured(loop, poster, bodies, n)
    print(
        f"{era} {auth} {log_level}: {n} tools/call, {used / n * 1e6:.1f} µs CPU each (all threads)"
    )
    print(f"paused while measuring: {', '.join(paused)}")
    loop.run_until_complete(services.stop(stop_apps=True))
    loop.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--era", choices=["2025", "2026"], default="2025")
    parser.add_argument("--auth", choices=["bearer", "anonymous"], default="bearer")
    parser.add_argument("--server", choices=["appdeck", "sdk"], default="appdeck")
    parser.add_argument("--log-level", choices=["warning", "info"], default="warning")
    args = parser.parse_args()
    if args.server == "sdk":
        main_sdk(args.n)
    else:
        main(args.n, args.era, args.auth, args.log_level)
