"""A sandboxed app's way to its own PostgreSQL database: a front that the server serves
*inside* the instance's network namespace, on ``127.0.0.1:5432`` there (as :mod:`.egress`
serves the outbound proxy), and that forwards to the real server from the host's namespace.

The sandbox's network holds only its loopback, so this front is the app's only road to any
database. It **pins the startup message**: TLS and GSS encryption requests are answered
``N`` (the bytes stay on this host: loopback in, loopback or a socket out), a cancel request
is refused, and the StartupMessage must be protocol 3, name exactly the app's role as
``user`` and the apps database as ``database``, and carry nothing but a few harmless
parameters (no ``options``, no ``replication``, no ``_pq_.`` extensions). Then the startup
message is forwarded as it came and the bytes flow both ways; authentication is the server's.
Where that server trusts local connections, **the pin is the boundary**; where it asks for
a password, the role's password (in the app's ``DATABASE_URL``) is checked as well.

Limits: the startup message (10 KiB, 10 s), each later client message (``max_message``),
connections per instance, and an idle timeout per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from dataclasses import dataclass
from typing import Final

from appdeck.runtime import netns
from appdeck.runtime.appdb import PostgresTarget

log = logging.getLogger("appdeck.runtime")

FRONT_PORT: Final = 5432
_STARTUP_LIMIT: Final = 10 * 1024
_PROTOCOL_3: Final = 3
_SSL_REQUEST: Final = 80877103
_GSSENC_REQUEST: Final = 80877104
_CANCEL_REQUEST: Final = 80877102
ALLOWED_PARAMETERS: Final = frozenset(
    {
        "user",
        "database",
        "application_name",
        "fallback_application_name",
        "client_encoding",
        "datestyle",
        "timezone",
        "extra_float_digits",
        "intervalstyle",
    }
)
"""What a startup message may carry; anything else (``options``, ``replication``, any other
setting, protocol extensions) is refused."""


class Refused(Exception):
    """The startup message is not the app's own; the text goes back to the app."""


@dataclass(frozen=True, slots=True)
class Startup:
    raw: bytes
    parameters: dict[str, str]


def parse_startup(body: bytes) -> dict[str, str]:
    """The parameters of a protocol-3 StartupMessage body (after the length and version)."""
    if body == b"\0":
        return {}
    if not body.endswith(b"\0\0"):
        raise Refused("malformed startup message")
    fields = body[:-2].split(b"\0")
    if len(fields) % 2:
        raise Refused("malformed startup message")
    parameters: dict[str, str] = {}
    for index in range(0, len(fields), 2):
        try:
            name, value = fields[index].decode(), fields[index + 1].decode()
        except UnicodeDecodeError:
            raise Refused("malformed startup message") from None
        if name.lower() in parameters or not name:
            raise Refused("malformed startup message")
        parameters[name.lower()] = value
    return parameters


def check_startup(parameters: dict[str, str], target: PostgresTarget) -> None:
    """Refuse anything but the app's own role on the apps database."""
    extra = sorted(set(parameters) - ALLOWED_PARAMETERS)
    if extra:
        raise Refused(f"startup parameter {extra[0]!r} is not allowed here")
    if parameters.get("user") != target.user:
        raise Refused(f"only user {target.user!r} may connect from this app")
    if parameters.get("database") != target.database:
        raise Refused(f"only database {target.database!r} may be opened from this app")


def error_response(message: str) -> bytes:
    """A FATAL ErrorResponse (SQLSTATE 28000, invalid authorization)."""
    fields = b"SFATAL\0VFATAL\0C28000\0M" + message.encode() + b"\0\0"
    return b"E" + struct.pack("!I", len(fields) + 4) + fields


async def read_startup(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Startup:
    """The StartupMessage, after answering ``N`` to encryption requests (at most two)."""
    for _ in range(3):
        head = await reader.readexactly(8)
        length, code = struct.unpack("!II", head)
        if not 8 <= length <= _STARTUP_LIMIT:
            raise Refused("startup message too large")
        body = await reader.readexactly(length - 8)
        if code in (_SSL_REQUEST, _GSSENC_REQUEST) and length == 8:
            writer.write(b"N")
            await writer.drain()
            continue
        if code == _CANCEL_REQUEST:
            raise Refused("cancel requests are not forwarded")
        if code >> 16 != _PROTOCOL_3:
            raise Refused("only protocol 3 is spoken here")
        return Startup(head + body, parse_startup(body))
    raise Refused("too many encryption requests")


class _Served:
    def __init__(self, server: asyncio.base_events.Server, target: PostgresTarget) -> None:
        self.server = server
        self.target = target
        self.open: set[asyncio.Task[None]] = set()


class PostgresFront:
    """Serves the front in instances' namespaces, by key (``stop(key)`` when it ends)."""

    def __init__(
        self,
        *,
        max_connections: int = 20,
        idle_timeout_s: float = 900.0,
        startup_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        max_message: int = 64 * 1024 * 1024,
    ) -> None:
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_message = max_message
        self._served: dict[str, _Served] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}

    def listen(self, key: str, netns_fd: int, target: PostgresTarget) -> None:
        """Listen on ``127.0.0.1:5432`` inside the namespace ``netns_fd`` now (before the
        app starts, so nothing else can take the port), serving from the event loop."""
        if key in self._served or key in self._starting:
            return
        sock = netns.socket_in(netns_fd)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", FRONT_PORT))
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        task = asyncio.get_running_loop().create_task(self._serve(key, sock, target))
        self._starting[key] = task

    async def _serve(self, key: str, sock: socket.socket, target: PostgresTarget) -> None:
        served: _Served | None = None

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            assert served is not None
            task = asyncio.current_task()
            assert task is not None
            if len(served.open) >= self.max_connections:
                writer.write(error_response("too many connections from this app"))
                await _close(writer)
                return
            served.open.add(task)
            try:  # stop() cancels it: the task's end, not an error to report
                with contextlib.suppress(asyncio.CancelledError):
                    await self._handle(reader, writer, served.target)
            finally:
                served.open.discard(task)

        try:
            server = await asyncio.start_server(accept, sock=sock, limit=256 * 1024)
        finally:
            self._starting.pop(key, None)
        served = self._served[key] = _Served(server, target)

    async def stop(self, key: str) -> None:
        starting = self._starting.pop(key, None)
        if starting is not None:
            with contextlib.suppress(Exception):
                await starting
        served = self._served.pop(key, None)
        if served is None:
            return
        served.server.close()
        for task in list(served.open):
            task.cancel()
        await asyncio.gather(*served.open, return_exceptions=True)
        with contextlib.suppress(Exception):
            await served.server.wait_closed()

    async def close(self) -> None:
        for key in [*self._starting, *self._served]:
            await self.stop(key)

    # ------------------------------------------------------------------ one connection

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: PostgresTarget
    ) -> None:
        try:
            try:
                async with asyncio.timeout(self.startup_timeout_s):
                    startup = await read_startup(reader, writer)
                check_startup(startup.parameters, target)
            except Refused as exc:
                writer.write(error_response(str(exc)))
                return
            except (asyncio.IncompleteReadError, TimeoutError, OSError):
                return
            upstream = await self._open(target)
            if upstream is None:
                writer.write(error_response("the database is not reachable"))
                return
            up_reader, up_writer = upstream
            try:
                up_writer.write(startup.raw)
                directions = {
                    asyncio.ensure_future(self._client_to_server(reader, up_writer)),
                    asyncio.ensure_future(_pipe(up_reader, writer, self.idle_timeout_s)),
                }
                try:  # either side ending ends the connection
                    await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in directions:
                        task.cancel()
                    await asyncio.gather(*directions, return_exceptions=True)
            finally:
                await _close(up_writer)
        finally:
            await _close(writer)

    async def _open(
        self, target: PostgresTarget
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if target.host.startswith("/"):
                    return await asyncio.open_unix_connection(
                        f"{target.host}/.s.PGSQL.{target.port}"
                    )
                return await asyncio.open_connection(target.host, target.port)
        except (OSError, TimeoutError) as exc:
            log.warning(
                "the PostgreSQL front cannot reach %s:%s: %s", target.host, target.port, exc
            )
            return None

    async def _client_to_server(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        """Forward whole messages (type, length, body), none larger than ``max_message``."""
        try:
            while True:
                async with asyncio.timeout(self.idle_timeout_s):
                    head = await source.readexactly(5)
                (length,) = struct.unpack("!I", head[1:])
                if not 4 <= length <= self.max_message:
                    log.info("PostgreSQL front: a client message of %d bytes refused", length)
                    return
                sink.write(head)
                left = length - 4
                while left:
                    async with asyncio.timeout(self.idle_timeout_s):
                        chunk = await source.read(min(left, 65536))
                    if not chunk:
                        return
                    sink.write(chunk)
                    left -= len(chunk)
                    await sink.drain()
                await sink.drain()
        except (asyncio.IncompleteReadError, TimeoutError, OSError):
            return
        finally:
            with contextlib.suppress(OSError):
                if sink.can_write_eof():
                    sink.write_eof()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, idle_s: float) -> None:
    with contextlib.suppress(TimeoutError, OSError):
        while True:
            async with asyncio.timeout(idle_s):
                data = await source.read(65536)
            if not data:
                return
            sink.write(data)
            await sink.drain()


async def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        await writer.drain()
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
