"""A fake DNS server for tests: Debian's ``pebble-challtestsrv`` (from Let's Encrypt's Pebble).

It answers every A query with one address (``default_ipv4``) unless told otherwise, and TXT
records only where set, through its management HTTP API. The ACME tests point Pebble at it
(``pebble -dnsserver``), the custom-domain tests resolve ``_appdeck-challenge.<domain>`` TXT
records through it, and the "laptop" namespace uses it as its resolver.

    async with challtestsrv(default_ipv4="127.0.0.1") as dns:
        await dns.set_txt("_appdeck-challenge.shop.example.test", "token")
        dns.dns_address  # "127.0.0.1:<port>"
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from tests.support.mcp import free_port

BINARY = "pebble-challtestsrv"
"""Debian package ``pebble`` (a test package in the Makefile)."""


def _fqdn(host: str) -> str:
    return host if host.endswith(".") else host + "."


@dataclass
class ChallTestSrv:
    dns_host: str
    dns_port: int
    management_url: str
    http: httpx.AsyncClient

    @property
    def dns_address(self) -> str:
        return f"{self.dns_host}:{self.dns_port}"

    async def _post(self, path: str, body: dict[str, object]) -> None:
        answer = await self.http.post(f"{self.management_url}{path}", json=body)
        answer.raise_for_status()

    async def set_txt(self, host: str, value: str) -> None:
        await self._post("/set-txt", {"host": _fqdn(host), "value": value})

    async def clear_txt(self, host: str) -> None:
        await self._post("/clear-txt", {"host": _fqdn(host)})

    async def add_a(self, host: str, addresses: list[str]) -> None:
        await self._post("/add-a", {"host": _fqdn(host), "addresses": addresses})

    async def set_default_ipv4(self, ip: str) -> None:
        await self._post("/set-default-ipv4", {"ip": ip})


@contextlib.asynccontextmanager
async def challtestsrv(
    *, default_ipv4: str = "127.0.0.1", dns_host: str = "127.0.0.1", dns_port: int | None = None
) -> AsyncIterator[ChallTestSrv]:
    """A running ``pebble-challtestsrv`` (DNS on ``dns_host:dns_port``, UDP and TCP), stopped
    on exit. Its HTTP-01/TLS-ALPN-01 responders are off: the platform answers those."""
    binary = shutil.which(BINARY)
    if binary is None:
        raise RuntimeError(f"{BINARY} is missing: `make test` installs Debian's pebble")
    port = dns_port if dns_port is not None else free_port()
    management = free_port()
    process = await asyncio.create_subprocess_exec(
        binary,
        "-defaultIPv4",
        default_ipv4,
        "-defaultIPv6",
        "",
        "-dns01",
        f"{dns_host}:{port}",
        "-http01",
        "",
        "-https01",
        "",
        "-tlsalpn01",
        "",
        "-management",
        f"127.0.0.1:{management}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            server = ChallTestSrv(dns_host, port, f"http://127.0.0.1:{management}", http)
            async with asyncio.timeout(30):  # a bound for a loaded machine, not a speed
                while True:
                    if process.returncode is not None:
                        raise RuntimeError(f"{BINARY} exited with {process.returncode}")
                    try:
                        await server.set_default_ipv4(default_ipv4)
                        break
                    except httpx.HTTPError:
                        await asyncio.sleep(0.05)
            yield server
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
