"""The sandbox through a real server: the deployed app runs as a uid of its own, and no
secret of its env is left in plaintext anywhere in the data dir."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import raw_http, rpc
from tests.support.mcp import initialize

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"


async def _tool(http: httpx.AsyncClient, sid: str, name: str, args: dict[str, Any], id: int) -> Any:
    reply = await rpc(http, sid, "tools/call", {"name": name, "arguments": args}, id=id)
    result = reply["result"]
    assert not result.get("isError"), result
    return result["structuredContent"]


def _uids_of_apps_started_by(server_pid: int, command: str) -> set[int]:
    """The uids of the descendants of ``server_pid`` whose command line is ``command``."""
    parents: dict[int, int] = {}
    lines: dict[int, str] = {}
    uids: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = (entry / "status").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(stat[stat.rindex(b")") + 2 :].split()[1])
        lines[pid] = cmdline.strip()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        uids[pid] = int(uid_line.split()[1])

    def descends(pid: int) -> bool:
        for _ in range(64):
            pid = parents.get(pid, 0)
            if pid == server_pid:
                return True
            if pid <= 1:
                return False
        return False

    return {uids[pid] for pid, line in lines.items() if line == command and descends(pid)}


@pytest.mark.e2e
async def test_a_deployed_app_runs_as_its_own_uid_and_its_secrets_never_touch_the_disk(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    shutil.copytree(HELLO, root / "hello")
    server = await launch_appdeck(env={"APPDECK_SOURCE_ROOTS": str(root)})
    secret = "sec-" + secrets.token_hex(12)
    async with asyncio.timeout(90), raw_http(server) as http:
        sid = await initialize(http)
        spec = {
            "source_path": str(root / "hello"),
            "run_command": "python3 app.py",
            "health_check": {"path": "/healthz", "timeout_s": 2},
        }
        app = await _tool(http, sid, "register_app", {"name": "hello", "spec": spec}, 2)
        app_id = app["app_id"]
        await _tool(
            http,
            sid,
            "env_vars",
            {"app_id": app_id, "action": "set", "name": "GREETING", "value": secret},
            3,
        )
        for number, strategy in enumerate(("recreate", "blue_green"), start=4):
            live = await _tool(
                http, sid, "deploy_app", {"app_id": app_id, "strategy": strategy}, number
            )
            assert live["state"] == "live", live
        url = (await _tool(http, sid, "get_app_url", {"app_id": app_id}, 9))["url"]
        parts = urlsplit(url)
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.get(
                f"http://127.0.0.1:{parts.port}/", headers={"host": parts.netloc}
            )
        assert answer.json()["greeting"] == secret  # the app has it, in its environment

        uids = _uids_of_apps_started_by(server.process.pid, "python3 app.py")
        assert uids, "the app's processes were not found"
        install = json.loads((server.data_dir / "install.json").read_text())
        assert uids == {install["uid_base"] + app_id}  # its install's range, not root

        leaks = [
            str(path)
            for path in server.data_dir.rglob("*")
            if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()
        ]
        assert leaks == []
        await _tool(
            http, sid, "manage_app", {"app_id": app_id, "action": "delete", "confirm": True}, 10
        )
