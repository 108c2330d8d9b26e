"""A test ACME CA: Debian's ``pebble`` (Let's Encrypt's test server), with a config written
here.

Its directory is served over HTTPS with a certificate from
:func:`tests.support.git_http.make_certificates` (so a client trusts ``pebble.ca_bundle``);
it resolves names through ``-dnsserver`` (the challtestsrv fixture: every name → 127.0.0.1) and
validates HTTP-01 on ``http_port`` (the data plane's plain HTTP port under test). The root that
signs what it issues is served by its management interface (:meth:`Pebble.root_pem`).

    async with challtestsrv() as dns, pebble(tmp_path, http_port=port, dns=dns.dns_address) as ca:
        ca.directory  # "https://127.0.0.1:<port>/dir"
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.git_http import make_certificates
from tests.support.mcp import free_port

BINARY = "pebble"


@dataclass
class Pebble:
    directory: str
    management_url: str
    ca_bundle: Path
    """Trusts the directory's HTTPS certificate (not what Pebble issues)."""

    async def root_pem(self) -> bytes:
        """The root that signs the certificates Pebble issues (new at every Pebble start)."""
        async with httpx.AsyncClient(
            verify=ssl.create_default_context(cafile=self.ca_bundle), timeout=5
        ) as http:
            answer = await http.get(f"{self.management_url}/roots/0")
            answer.raise_for_status()
            return answer.content


@contextlib.asynccontextmanager
async def pebble(
    where: Path, *, http_port: int, dns: str, env: dict[str, str] | None = None
) -> AsyncIterator[Pebble]:
    """A running Pebble, stopped on exit. ``env`` adds ``PEBBLE_*`` settings (say,
    ``PEBBLE_VA_ALWAYS_VALID``)."""
    binary = shutil.which(BINARY)
    if binary is None:
        raise RuntimeError(f"{BINARY} is missing: `make test` installs Debian's pebble")
    ca, cert, key = make_certificates(where / "pebble-tls")
    port, management = free_port(), free_port()
    config = where / "pebble.json"
    config.write_text(
        json.dumps(
            {
                "pebble": {
                    "listenAddress": f"127.0.0.1:{port}",
                    "managementListenAddress": f"127.0.0.1:{management}",
                    "certificate": str(cert),
                    "privateKey": str(key),
                    "httpPort": http_port,
                    "tlsPort": free_port(),
                    "ocspResponderURL": "",
                    "externalAccountBindingRequired": False,
                }
            }
        )
    )
    variables = {
        **os.environ,
        "PEBBLE_VA_NOSLEEP": "1",
        "PEBBLE_WFE_NONCEREJECT": "0",  # no random badNonce: a test must not depend on luck
        "PEBBLE_AUTHZREUSE": "0",  # reuse 1 time in 100, not half (Pebble: `rand.Intn(100) > 0`)
        **(env or {}),
    }
    log = (where / "pebble.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        binary,
        "-config",
        str(config),
        "-dnsserver",
        dns,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
        env=variables,
    )
    try:
        served = Pebble(f"https://127.0.0.1:{port}/dir", f"https://127.0.0.1:{management}", ca)
        async with httpx.AsyncClient(
            verify=ssl.create_default_context(cafile=ca), timeout=5
        ) as http:
            async with asyncio.timeout(30):  # a bound for a loaded machine, not a speed
                while True:
                    if process.returncode is not None:
                        raise RuntimeError(f"{BINARY} exited with {process.returncode}")
                    try:
                        (await http.get(served.directory)).raise_for_status()
                        break
                    except httpx.HTTPError:
                        await asyncio.sleep(0.05)
        yield served
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        log.close()
