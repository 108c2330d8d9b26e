"""``appdeck serve`` holds its ports on both loopbacks: the control plane and the ingress
answer on 127.0.0.1 and [::1], and no other process can bind [::1] on those ports while the
server runs; a port already taken on [::1] stops the start with one clear line."""

from __future__ import annotations

import asyncio
import errno
import re
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.appdeck_process import clean_env, serve_command
from tests.support.mcp import initialize

from .conftest import Launcher

INGRESS_LINE = re.compile(r"Apps are served by the ingress router at \S+:(\d+)/\s*$", re.M)
BIND = """
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
try:
    s.bind(("::1", int(sys.argv[1])))
except OSError as exc:
    print(exc.errno)
else:
    print("bound")
"""


async def _bind_elsewhere(port: int) -> str:
    """What another process gets when it binds [::1]:port."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BIND, str(port), stdout=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(10):
        out, _ = await process.communicate()
    return out.decode().strip()


@pytest.mark.e2e
async def test_the_server_answers_on_both_loopbacks_and_holds_its_ports_there(
    launch_appdeck: Launcher,
) -> None:
    server = await launch_appdeck()
    port = urlsplit(server.url).port
    found = INGRESS_LINE.search(server.stdout_path.read_text())
    assert port is not None
    assert found is not None
    ingress_port = int(found.group(1))
    for host in ("127.0.0.1", "[::1]"):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=5) as http:
            health = await http.get("/healthz")
            assert health.status_code == 200, host
            assert health.json()["status"] == "ok"
            await initialize(http, server.token)  # the Host check of /mcp takes [::1]:port
            routed = await http.get(
                f"http://{host}:{ingress_port}/", headers={"host": "nothing-here.localhost"}
            )
            assert routed.status_code == 404, host  # the ingress itself answered: no such app
    for taken in (port, ingress_port):
        assert await _bind_elsewhere(taken) == str(errno.EADDRINUSE), taken


@pytest.mark.e2e
async def test_a_port_taken_on_the_ipv6_loopback_stops_the_start_with_one_line(
    tmp_path: Path,
) -> None:
    squatter = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    squatter.bind(("::1", 0))
    squatter.listen(1)
    port = squatter.getsockname()[1]
    command = serve_command(tmp_path / "data", dev=False)
    command[command.index("--port") + 1] = str(port)
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=clean_env(),
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(20):
                _, err = await process.communicate()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    finally:
        squatter.close()
    assert process.returncode == 1
    assert err.decode().strip() == (
        f"appdeck serve: port {port} is already in use on [::1]: choose another with --port or "
        "APPDECK_PORT (0 picks a free one)"
    )
