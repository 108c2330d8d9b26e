"""The ``appdeck serve`` process itself: its "listening on" line is a readiness signal."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.appdeck_process import AppDeckProcess, clean_env, serve_command

from .conftest import Launcher

URL_LINE = re.compile(rb"MCP server listening on (http://\S+/mcp)")


@pytest.mark.e2e
async def test_the_server_accepts_connections_as_soon_as_it_prints_its_url(
    tmp_path: Path,
) -> None:
    # stdout is a pipe here (not a polled file) so the line is seen the moment it is written
    process = await asyncio.create_subprocess_exec(
        *serve_command(tmp_path / "data"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=clean_env(),
        start_new_session=True,
    )
    assert process.stdout is not None
    try:
        async with asyncio.timeout(90):  # a bound for a loaded machine, not a speed
            while True:
                line = await process.stdout.readline()
                assert line, "appdeck serve closed stdout before printing its URL"
                if found := URL_LINE.search(line):
                    break
        url = urlsplit(found.group(1).decode())
        assert url.hostname is not None
        assert url.port is not None
        async with asyncio.timeout(5):
            _, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.close()
        await writer.wait_closed()
    finally:
        if process.returncode is None:
            process.kill()
        async with asyncio.timeout(10):
            await process.wait()
            with contextlib.suppress(OSError):
                await process.stdout.read()  # to EOF, so the pipe transport closes


@pytest.mark.e2e
async def test_an_idle_keep_alive_connection_outlives_the_clients_pool_expiry(
    appdeck: AppDeckProcess,
) -> None:
    """The server must not close an idle connection while a client (httpx: 5 s) may reuse it:
    both closing at 5 s lost the request sent at that moment (a ReadError under load)."""
    url = urlsplit(appdeck.url)
    assert url.hostname is not None
    assert url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    request = f"GET /.well-known/oauth-protected-resource HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n"
    try:
        for _ in range(2):
            writer.write(request.encode())
            await writer.drain()
            async with asyncio.timeout(30):
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200"), head
                length = re.search(rb"(?i)content-length: (\d+)", head)
                assert length is not None
                await reader.readexactly(int(length.group(1)))
            await asyncio.sleep(6.5)  # past httpx's (and uvicorn's default) 5 s
        assert not reader.at_eof()
    finally:
        writer.close()


async def test_sigterm_stops_the_server_cleanly_and_it_exits_0(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    """SIGTERM (what a service manager sends) runs the server's own stop: uvicorn raised the
    signal again once it had shut down, and the process died before that stop ran (its
    marker file stayed, replicas never unregistered)."""
    server = await launch_appdeck()
    marker = tmp_path / "data" / "server.json"
    assert marker.exists()
    assert await server.stop(grace=60) == 0  # a bound for a loaded machine, not a speed
    assert not marker.exists()
