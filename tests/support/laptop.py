"""A "laptop" for end-to-end tests: a network namespace of its own, reached from the host over
a veth pair, resolving names through a fake DNS server on the host's side, so a test can act
as an agent's machine that reaches the platform over a network, never over loopback.

    async with laptop() as lap:                    # netns "laptop-<hex>", veth 10.x.y.0/30
        lap.host_ip, lap.laptop_ip                 # "10.x.y.1" (host side), "10.x.y.2"
        await lap.dns.set_txt("_appdeck-challenge.shop.example.test", token)
        answer = await lap.run("curl", "-s", "http://shop.example.test:8088/")

Every name resolves to ``host_ip`` (pebble-challtestsrv's default A answer, on
``host_ip:53``, written into ``/etc/netns/<name>/resolv.conf``, which ``ip netns exec``
mounts over ``/etc/resolv.conf``), so ``*.apps.example.test`` and any custom domain lead to
whatever the host listens on at that address. Everything is removed on exit, failure or not.
Needs root and iproute2 (``ip``); :func:`unavailable` says why not, for a test to fail with.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.challtestsrv import ChallTestSrv, challtestsrv

NETNS_ETC = Path("/etc/netns")
POOL = ipaddress.ip_network("10.200.0.0/14")
"""Where a laptop's /30 is drawn from (10.200.0.0 to 10.203.255.255): rarely a site's."""
COMMAND_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Laptop:
    name: str
    host_ip: str
    laptop_ip: str
    host_veth: str
    dns: ChallTestSrv

    async def run(self, *argv: str, limit_s: float = COMMAND_SECONDS) -> Ran:
        """``argv`` run inside the laptop's namespace (its network and resolver), bounded."""
        return await _run("ip", "netns", "exec", self.name, *argv, limit_s=limit_s)

    async def curl(self, url: str, *options: str, limit_s: float = 15.0) -> tuple[int, str]:
        """GET ``url`` from the laptop: (HTTP status, body); status 0 when nothing answered."""
        ran = await self.run(
            "curl",
            "-sS",
            "--max-time",
            str(limit_s),
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            *options,
            url,
            limit_s=limit_s + 5,
        )
        body, _, status = ran.stdout.rpartition("\n")
        return (int(status) if status.isdigit() else 0), body


def unavailable() -> str | None:
    """Why a laptop cannot be made here (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "curl", "pebble-challtestsrv"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (iproute2, curl, pebble)"
    return None


async def _run(*argv: str, limit_s: float = COMMAND_SECONDS, check: bool = False) -> Ran:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        async with asyncio.timeout(limit_s):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    ran = Ran(process.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))
    if check and ran.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({ran.returncode}): {ran.stderr.strip()}")
    return ran


async def _taken_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Every network the host has an address or a route in (the default route aside)."""
    taken: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    addresses = json.loads((await _run("ip", "-j", "addr", check=True)).stdout or "[]")
    for link in addresses:
        for info in link.get("addr_info", []):
            taken.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", False))
    for route in json.loads((await _run("ip", "-j", "route", check=True)).stdout or "[]"):
        destination = route.get("dst", "default")
        if destination != "default":
            taken.append(ipaddress.ip_network(destination, strict=False))
    return taken


async def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 of :data:`POOL` that overlaps nothing the host has (random: parallel runs)."""
    taken = await _taken_networks()
    for _ in range(200):
        offset = secrets.randbelow(POOL.num_addresses // 4) * 4
        subnet = ipaddress.ip_network(f"{POOL.network_address + offset}/30")
        if not any(subnet.overlaps(n) for n in taken if n.version == 4):
            return subnet
    raise RuntimeError(f"no free /30 in {POOL}")


@contextlib.asynccontextmanager
async def laptop() -> AsyncIterator[Laptop]:
    """A laptop namespace with its veth link and resolver; all of it removed on exit."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(f"no laptop network here: {reason}")
    tag = secrets.token_hex(3)
    name, host_veth, lap_veth = f"laptop-{tag}", f"lt{tag}h", f"lt{tag}l"
    subnet = await _free_subnet()
    host_ip, lap_ip = (str(subnet.network_address + i) for i in (1, 2))
    etc = NETNS_ETC / name
    try:
        await _run("ip", "netns", "add", name, check=True)
        await _run("ip", "link", "add", host_veth, "type", "veth", "peer", "name", lap_veth,
                   check=True)  # fmt: skip
        await _run("ip", "link", "set", lap_veth, "netns", name, check=True)
        await _run("ip", "addr", "add", f"{host_ip}/30", "dev", host_veth, check=True)
        await _run("ip", "link", "set", host_veth, "up", check=True)
        inside = ("ip", "netns", "exec", name, "ip")
        await _run(*inside, "addr", "add", f"{lap_ip}/30", "dev", lap_veth, check=True)
        await _run(*inside, "link", "set", lap_veth, "up", check=True)
        await _run(*inside, "link", "set", "lo", "up", check=True)
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(f"nameserver {host_ip}\noptions timeout:2 attempts:2\n")
        (etc / "hosts").write_text("127.0.0.1 localhost\n")  # nothing of the host's
        async with challtestsrv(default_ipv4=host_ip, dns_host=host_ip, dns_port=53) as dns:
            yield Laptop(name, host_ip, lap_ip, host_veth, dns)
    finally:
        await _run("ip", "netns", "del", name)  # takes its end of the pair, and so both
        await _run("ip", "link", "del", host_veth)  # if it never got there
        _forget(etc)


def _forget(etc: Path) -> None:
    shutil.rmtree(etc, ignore_errors=True)
    with contextlib.suppress(OSError):
        NETNS_ETC.rmdir()  # only when no other namespace has files there
