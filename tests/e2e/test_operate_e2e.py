"""Operating an app through a real server (issue 20, item 10): stop answers 503 "stopped",
its processes are gone from the host's process table and its data stays; it stays stopped
across a server restart; start brings it back."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import Inbox, official_client

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"


def _app_processes(under: Path) -> int:
    """The app shims on the host whose command line names ``under`` (this test's dirs)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(under) in cmdline and "shim" in cmdline:
            count += 1
    return count


async def _get(app_url: str) -> httpx.Response:
    parts = urlsplit(app_url)
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(f"http://127.0.0.1:{parts.port}/", headers={"host": parts.netloc})


async def _call(client: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, result
    return dict(result.structured_content)


@pytest.mark.e2e
async def test_stop_survives_a_server_restart_keeps_the_data_and_start_serves_again(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    shutil.copytree(HELLO, root / "hello")
    env = {"APPDECK_SOURCE_ROOTS": json.dumps([str(root)])}
    spec = {
        "source_path": str(root / "hello"),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 5},
        "instances": 2,
    }
    first = await launch_appdeck(env=env)
    async with asyncio.timeout(120), official_client(first, Inbox()) as client:
        app_id = (await _call(client, "register_app", {"name": "hello", "spec": spec}))["app_id"]
        table = {"app_id": app_id, "table": "notes"}
        columns = [{"name": "title", "type": "text"}]
        await _call(client, "manage_table", {"action": "create", **table, "columns": columns})
        await _call(client, "records", {"action": "insert", **table, "rows": [{"title": "kept"}]})
        live = await _call(client, "deploy_app", {"app_id": app_id, "wait_seconds": 60})
        assert live["state"] == "live", live
        url = live["url"]
        assert (await _get(url)).status_code == 200
        assert _app_processes(tmp_path) == 2

        await _call(client, "restart_app", {"app_id": app_id, "action": "stop"})
        stopped = await _get(url)
        assert stopped.status_code == 503
        assert "stopped" in stopped.text
        assert _app_processes(tmp_path) == 0

    await first.stop()
    second = await launch_appdeck(data_dir=first.data_dir, env=env)
    async with asyncio.timeout(120), official_client(second, Inbox()) as client:
        got = await _call(client, "manage_app", {"app_id": app_id, "action": "get"})
        assert got["stopped"] is True
        url = got["url"]
        again = await _get(url)
        assert again.status_code == 503  # still stopped after the restart
        assert "stopped" in again.text
        assert _app_processes(tmp_path) == 0
        rows = await _call(client, "records", {"action": "list", **table})
        assert [r["title"] for r in rows["rows"]] == ["kept"]  # the data stayed

        started = await _call(client, "restart_app", {"app_id": app_id, "action": "start"})
        assert started["running_instances"] == 2
        assert (await _get(url)).status_code == 200
        assert _app_processes(tmp_path) == 2
