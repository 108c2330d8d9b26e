"""The ``appdeck serve`` process itself: its "listening on" line is a readiness signal."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.appdeck_process import clean_env, serve_command

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
        async with asyncio.timeout(20):
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
