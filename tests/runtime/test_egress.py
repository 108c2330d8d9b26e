"""The outbound proxy: its address policy, and tunnels from inside a real sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appdeck.runtime import LocalDriver
from appdeck.runtime.egress import EgressPolicy, EgressProxy
from appdeck.runtime.sandbox import Sandbox

from .conftest import FAST_RESTARTS, kill_everything_under
from .test_sandbox import probe, sandbox, spec, started

__all__ = ["sandbox"]  # the module fixture, shared


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.2",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # shared address space (CGNAT)
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "fc00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
    ],
)
def test_the_proxy_never_tunnels_to_this_host_or_a_private_network(address: str) -> None:
    assert not EgressPolicy(blocked=frozenset()).allows(ipaddress.ip_address(address), 443)


@pytest.mark.parametrize("address", ["1.1.1.1", "151.101.0.223", "2606:4700:4700::1111"])
def test_the_proxy_tunnels_to_public_addresses(address: str) -> None:
    assert EgressPolicy(blocked=frozenset()).allows(ipaddress.ip_address(address), 443)


def test_the_hosts_own_public_address_is_refused_too() -> None:
    own = ipaddress.ip_address("203.0.113.7")
    assert not EgressPolicy(blocked=frozenset({own})).allows(own, 443)


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    """A TCP server on the host's loopback that answers ``pong: <line>``."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        writer.write(b"pong: " + line)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def driver_with(runtime_dir: Path, sandbox: Sandbox, policy: EgressPolicy) -> LocalDriver:
    return LocalDriver(
        runtime_dir,
        restart=FAST_RESTARTS,
        leftover_grace_s=1.0,
        sandbox=sandbox,
        egress=EgressProxy(policy),
    )


@contextlib.asynccontextmanager
async def running(driver: LocalDriver) -> AsyncIterator[LocalDriver]:
    try:
        yield driver
    finally:
        for release_id in await driver.releases():
            with contextlib.suppress(Exception):
                await driver.remove(release_id)
        await driver.detach()
        kill_everything_under(driver.runtime_dir)


async def test_an_app_that_may_go_out_tunnels_through_the_proxy_and_one_that_may_not_cannot(
    runtime_dir: Path, sandbox: Sandbox, echo_port: int
) -> None:
    # The policy lets this one loopback server through, standing in for a public host.
    policy = EgressPolicy(extra_allowed=(("127.0.0.1", echo_port),))
    async with running(await driver_with(runtime_dir, sandbox, policy)) as driver:
        outgoing = await started(driver, spec(51, outbound=True))
        went = await probe(driver, outgoing, f"/tunnel?host=127.0.0.1&port={echo_port}")
        assert went == {"ok": True, "status": 200, "answer": "pong: ping\n"}

        closed = await started(driver, spec(52))
        stayed = await probe(driver, closed, f"/tunnel?host=127.0.0.1&port={echo_port}")
        assert stayed["ok"] is False
        assert "no HTTPS_PROXY" in stayed["error"]
        direct = await probe(driver, closed, "/connect?host=127.0.0.1&port=3128")
        assert direct["ok"] is False  # nobody listens for it


async def test_the_proxy_refuses_this_host_private_networks_and_metadata(
    runtime_dir: Path, sandbox: Sandbox, echo_port: int
) -> None:
    async with running(await driver_with(runtime_dir, sandbox, EgressPolicy())) as driver:
        ref = await started(driver, spec(53, outbound=True))
        for host, port in (
            ("127.0.0.1", echo_port),
            ("localhost", echo_port),
            ("::1", 6379),
            ("169.254.169.254", 80),
            ("10.0.0.1", 443),
        ):
            outcome = await probe(driver, ref, f"/tunnel?host={host}&port={port}")
            assert outcome == {"ok": True, "status": 403}, (host, outcome)


async def test_a_build_goes_out_through_the_proxy(
    runtime_dir: Path, sandbox: Sandbox, echo_port: int, tmp_path: Path
) -> None:
    source = tmp_path / "app"
    source.mkdir()
    (source / "fetch.py").write_text(
        "import os, socket\n"
        "host, port = os.environ['HTTPS_PROXY'][7:].rsplit(':', 1)\n"
        "s = socket.create_connection((host, int(port)), timeout=5)\n"
        f"s.sendall(b'CONNECT 127.0.0.1:{echo_port} HTTP/1.1\\r\\n\\r\\n')\n"
        "assert b' 200 ' in s.recv(200)\n"
        "s.sendall(b'from the build\\n')\n"
        "print(s.recv(100).decode().strip())\n"
    )
    policy = EgressPolicy(extra_allowed=(("127.0.0.1", echo_port),))
    async with running(await driver_with(runtime_dir, sandbox, policy)) as driver:
        build = spec(54, source, build_command="python3 fetch.py")
        await driver.prepare(build)
        page = await driver.logs("54-1", "build", cursor=0, grep="pong")
        assert [line.text for line in page.lines] == ["pong: from the build"]
