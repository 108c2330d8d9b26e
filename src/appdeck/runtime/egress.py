"""Outbound network for sandboxes: an HTTP ``CONNECT`` proxy that the server serves *inside*
a sandbox's network namespace, on ``127.0.0.1:3128`` there, and that connects out from the
host's namespace to public addresses only.

A sandbox's network holds nothing but its own loopback (:mod:`appdeck.runtime.netns`), so
without this proxy an app or a build reaches nothing at all. With it (builds always, so that
``pip install`` and ``npm install`` work; instances when ``spec.network.outbound`` is set),
``HTTPS_PROXY``/``HTTP_PROXY`` point at it and it lets through tunnels to **global unicast
addresses only**: never loopback, private, link-local (cloud metadata at 169.254.169.254),
shared (CGNAT), multicast or reserved ranges, and never an address of this host itself —
so the control plane, Redis, PostgreSQL, other apps and the operator's LAN stay out of reach
whatever a name resolves to (the proxy resolves it, and checks every address it would use).

Only ``CONNECT`` (TLS tunnels: what pip, npm and HTTPS clients use); plain-HTTP proxying is
refused (405). Limits: the request head (8 KiB, 10 s), tunnels per namespace, and an idle
timeout per tunnel.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from appdeck.runtime import netns

log = logging.getLogger("appdeck.runtime")

PROXY_PORT: Final = 3128
"""Where the proxy listens inside each namespace that has one."""
PROXY_URL: Final = f"http://127.0.0.1:{PROXY_PORT}"
_HEAD_LIMIT: Final = 8 * 1024
_SIOCGIFADDR: Final = 0x8915

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def proxy_env() -> dict[str, str]:
    """What a process that may go out needs in its environment."""
    return {
        "HTTPS_PROXY": PROXY_URL,
        "HTTP_PROXY": PROXY_URL,
        "https_proxy": PROXY_URL,
        "http_proxy": PROXY_URL,
        "NO_PROXY": "localhost,127.0.0.1,::1",
        "no_proxy": "localhost,127.0.0.1,::1",
    }


def host_addresses() -> set[Address]:
    """This host's own interface addresses (an app must not reach the server through them)."""
    found: set[Address] = set()
    with contextlib.suppress(OSError), open("/proc/net/if_inet6", encoding="ascii") as handle:
        for line in handle:
            raw = line.split()[0]
            found.add(ipaddress.IPv6Address(int(raw, 16)))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                request = struct.pack("256s", name.encode()[:15])
                answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
                found.add(ipaddress.IPv4Address(answer[20:24]))
    return found


@dataclass(frozen=True)
class EgressPolicy:
    """Which addresses a tunnel may go to: global unicast, not this host's."""

    blocked: frozenset[Address] = field(default_factory=lambda: frozenset(host_addresses()))
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    """Allowed besides public addresses (``APPDECK_EGRESS_ALLOW``: an internal mirror);
    never loopback nor this host's own addresses."""
    extra_allowed: tuple[tuple[str, int], ...] = ()
    """(address, port) pairs allowed whatever their range: tests only (a loopback server)."""

    def allows(self, address: Address, port: int) -> bool:
        if (str(address), port) in self.extra_allowed:
            return True
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address in self.blocked or address.is_loopback or address.is_unspecified:
            return False
        if any(address in network for network in self.networks):
            return True
        return address.is_global and not address.is_multicast


class _Tunnels:
    """The proxy served in one namespace."""

    def __init__(self, server: asyncio.base_events.Server) -> None:
        self.server = server
        self.open: set[asyncio.Task[None]] = set()


class EgressProxy:
    """Serves the proxy in namespaces, by key (``stop(key)`` when the namespace's user ends)."""

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        *,
        max_tunnels: int = 64,
        idle_timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        resolve: Callable[[str, int], Iterable[Address]] | None = None,
    ) -> None:
        self.policy = policy or EgressPolicy()
        self.max_tunnels = max_tunnels
        self.idle_timeout_s = idle_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._resolve = resolve
        self._served: dict[str, _Tunnels] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}

    def listen(self, key: str, netns_fd: int) -> None:
        """Listen on ``127.0.0.1:3128`` inside the namespace ``netns_fd`` now (connections
        queue at once: call it before the sandbox starts), and serve from the event loop."""
        if key in self._served or key in self._starting:
            return
        sock = netns.socket_in(netns_fd)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", PROXY_PORT))
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        self._starting[key] = asyncio.get_running_loop().create_task(self._serve(key, sock))

    async def _serve(self, key: str, sock: socket.socket) -> None:
        tunnels: _Tunnels | None = None

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            assert tunnels is not None
            task = asyncio.current_task()
            assert task is not None
            if len(tunnels.open) >= self.max_tunnels:
                await _answer(writer, 429, "too many tunnels from this sandbox")
                return
            tunnels.open.add(task)
            try:
                await self._handle(reader, writer)
            finally:
                tunnels.open.discard(task)

        try:
            server = await asyncio.start_server(accept, sock=sock)
        finally:
            self._starting.pop(key, None)
        tunnels = self._served[key] = _Tunnels(server)

    async def stop(self, key: str) -> None:
        starting = self._starting.pop(key, None)
        if starting is not None:
            with contextlib.suppress(Exception):
                await starting
        tunnels = self._served.pop(key, None)
        if tunnels is None:
            return
        tunnels.server.close()
        for task in list(tunnels.open):
            task.cancel()
        await asyncio.gather(*tunnels.open, return_exceptions=True)
        with contextlib.suppress(Exception):
            await tunnels.server.wait_closed()

    async def close(self) -> None:
        for key in [*self._starting, *self._served]:
            await self.stop(key)

    # ------------------------------------------------------------------ one request

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                async with asyncio.timeout(10):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            if len(head) > _HEAD_LIMIT:
                await _answer(writer, 431, "request head too large")
                return
            parts = head.split(b"\r\n", 1)[0].split()
            if len(parts) != 3 or parts[0] != b"CONNECT":
                await _answer(writer, 405, "only CONNECT tunnels (HTTPS) go out")
                return
            host, _, port_text = parts[1].decode("ascii", "replace").rpartition(":")
            host = host.strip("[]")
            if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
                await _answer(writer, 400, "CONNECT needs host:port")
                return
            upstream = await self._open(host, int(port_text))
            if upstream is None:
                await _answer(writer, 403, f"{host}:{port_text} is not a public address")
                return
            up_reader, up_writer = upstream
            try:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await asyncio.gather(
                    self._pipe(reader, up_writer),
                    self._pipe(up_reader, writer),
                    return_exceptions=True,
                )
            finally:
                up_writer.close()
                with contextlib.suppress(Exception):
                    await up_writer.wait_closed()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _open(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            addresses = await self._addresses(host, port)
        except (OSError, ValueError):
            return None
        allowed = [a for a in addresses if self.policy.allows(a, port)]
        if not allowed or len(allowed) != len(addresses):
            return None  # every address a name resolves to must pass, or none is tried
        for address in allowed:
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    return await asyncio.open_connection(str(address), port)
            except (OSError, TimeoutError):
                continue
        return None

    async def _addresses(self, host: str, port: int) -> list[Address]:
        if self._resolve is not None:
            return list(self._resolve(host, port))
        with contextlib.suppress(ValueError):
            return [ipaddress.ip_address(host)]
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        return [ipaddress.ip_address(info[4][0]) for info in infos]

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while True:
                async with asyncio.timeout(self.idle_timeout_s):
                    data = await source.read(65536)
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        finally:
            with contextlib.suppress(OSError):
                if sink.can_write_eof():
                    sink.write_eof()


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = f"{reason}\n".encode()
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()
