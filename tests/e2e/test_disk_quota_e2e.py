"""Disk quotas per app through a real sandboxed server (issue 19, finding 4): an app writing
three times its disk into its workspace, its database directory and /tmp is stopped by
ENOSPC at its limit, the host's file system holds at most that limit, the app and the server
keep answering, the instance log says the disk is full, and deleting the app removes its
disk."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from appdeck.runtime.disks import loop_available, mounts, unmount_under
from tests.e2e.conftest import Launcher
from tests.e2e.helpers import raw_http, rpc
from tests.support.mcp import initialize

MIB = 1024 * 1024
DISK_MB = 64
"""APPDECK_APP_DISK_MB of the server: /tmp gets 16 MiB, the image (workspace, data) 48."""
APP = """
import json, os, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def fill(path, limit):
    written, error, chunk = 0, 0, b"x" * (1 << 20)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        return {"written": 0, "errno": exc.errno}
    try:
        while written < limit:
            try:
                written += os.write(fd, chunk)
            except OSError as exc:
                error = exc.errno
                break
    finally:
        os.close(fd)
    return {"written": written, "errno": error}

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/fill":
            body = fill(query["path"][0], int(query["mb"][0]) << 20)
        else:
            body = {"ok": True}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


async def _tool(http: httpx.AsyncClient, sid: str, name: str, args: dict[str, Any], id: int) -> Any:
    reply = await rpc(http, sid, "tools/call", {"name": name, "arguments": args}, id=id)
    result = reply["result"]
    assert not result.get("isError"), result
    return result["structuredContent"]


def _allocated(root: Path) -> int:
    """Bytes allocated under ``root`` on its own file system (mounts under it not entered):
    what the host's file system holds of the data dir, the app disks' images included."""
    device = os.stat(root).st_dev
    total = 0
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.lstat(os.path.join(here, d)).st_dev == device]
        for name in (*dirs, *files):
            info = os.lstat(os.path.join(here, name))
            total += info.st_blocks * 512
    return total


@pytest.fixture
def unmounted(tmp_path: Path) -> Iterator[None]:
    """Whatever the test leaves mounted under its directory is unmounted after it."""
    yield
    unmount_under(f"{tmp_path}/")


@pytest.mark.e2e
@pytest.mark.skipif(loop_available() is not None, reason=f"loop images: {loop_available()}")
@pytest.mark.usefixtures("unmounted")
async def test_an_app_writing_three_times_its_disk_stops_at_its_limit_and_the_host_keeps_room(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    (root / "filler").mkdir(parents=True)
    (root / "filler" / "app.py").write_text(APP)
    server = await launch_appdeck(
        env={"APPDECK_SOURCE_ROOTS": str(root), "APPDECK_APP_DISK_MB": str(DISK_MB)}
    )
    async with asyncio.timeout(120), raw_http(server) as http:
        sid = await initialize(http)
        spec = {
            "source_path": str(root / "filler"),
            "run_command": "python3 app.py",
            "health_check": {"path": "/healthz", "timeout_s": 2},
        }
        app = await _tool(http, sid, "register_app", {"name": "filler", "spec": spec}, 2)
        app_id = app["app_id"]
        live = await _tool(http, sid, "deploy_app", {"app_id": app_id}, 3)
        assert live["state"] == "live", live
        url = urlsplit((await _tool(http, sid, "get_app_url", {"app_id": app_id}, 4))["url"])
        before_alloc = _allocated(server.data_dir)
        before_free = os.statvfs(server.data_dir)
        async with httpx.AsyncClient(timeout=60) as client:

            async def get(path: str) -> Any:
                answer = await client.get(
                    f"http://127.0.0.1:{url.port}{path}", headers={"host": url.netloc}
                )
                assert answer.status_code == 200, answer.text
                return answer.json()

            filled = {
                where: await get(f"/fill?path={where}/fill.bin&mb={3 * DISK_MB}")
                for where in ("/app", "/data", "/tmp")
            }
            for where, outcome in filled.items():
                assert outcome["errno"] == errno.ENOSPC, (where, outcome)
            on_image = filled["/app"]["written"] + filled["/data"]["written"]
            assert on_image <= DISK_MB * MIB
            assert filled["/tmp"]["written"] <= DISK_MB * MIB
            assert on_image + filled["/tmp"]["written"] <= DISK_MB * MIB  # one budget

            grown = _allocated(server.data_dir) - before_alloc
            assert grown <= DISK_MB * MIB  # the host holds at most the app's disk
            after_free = os.statvfs(server.data_dir)
            dropped = (before_free.f_bavail - after_free.f_bavail) * after_free.f_frsize
            assert dropped < 3 * 3 * DISK_MB * MIB // 2  # wide: other tests share this disk

            assert (await get("/healthz"))["ok"] is True  # the app still answers
            log_lines = await _disk_full_lines(server.data_dir, app_id)
            assert log_lines, "the instance log does not say the disk is full"
        apps = await _tool(http, sid, "list_my_apps", {}, 5)  # the server still answers
        assert apps
        await _tool(
            http, sid, "manage_app", {"app_id": app_id, "action": "delete", "confirm": True}, 6
        )
    left = [point for point in mounts() if point.startswith(str(server.data_dir) + "/")]
    assert left == []
    assert list((server.data_dir / "disks").glob("*.img")) == []


async def _disk_full_lines(data_dir: Path, app_id: int) -> list[str]:
    """The runtime log's 'disk is full' lines, waited for (the shim looks every 2 s)."""
    deadline = time.monotonic() + 30
    while True:
        found = await asyncio.to_thread(_lines_saying, data_dir, app_id, "the app's disk is full")
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)


def _lines_saying(data_dir: Path, app_id: int, text: str) -> list[str]:
    return [
        line
        for log in data_dir.glob(f"runtime/apps/{app_id}/releases/*/runtime.log")
        for line in log.read_text(errors="replace").splitlines()
        if text in line
    ]
