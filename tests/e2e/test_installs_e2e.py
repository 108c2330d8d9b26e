"""Two installs on one host (production beside staging, ``make run`` beside ``make test``),
with default settings: each has its own uids, cgroups and stage, so neither touches the other's
apps; a copy of a running install's data dir is refused (issue 19, finding 9)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import raw_http
from tests.e2e.test_sandbox_e2e import _tool, _uids_of_apps_started_by
from tests.support.appdeck_process import AppDeckProcess
from tests.support.mcp import initialize

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
PROBES = 20


async def _deploy_hello(server: AppDeckProcess, source: Path) -> tuple[int, str]:
    """Register and deploy the hello app on ``server``: its app id and ingress URL."""
    async with raw_http(server) as http:
        sid = await initialize(http)
        spec = {
            "source_path": str(source),
            "run_command": "python3 app.py",
            "health_check": {"path": "/healthz", "timeout_s": 2},
        }
        app = await _tool(http, sid, "register_app", {"name": "hello", "spec": spec}, 2)
        live = await _tool(http, sid, "deploy_app", {"app_id": app["app_id"]}, 3)
        assert live["state"] == "live", live
        url = (await _tool(http, sid, "get_app_url", {"app_id": app["app_id"]}, 4))["url"]
        return int(app["app_id"]), str(url)


async def _delete(server: AppDeckProcess, app_id: int) -> None:
    async with raw_http(server) as http:
        sid = await initialize(http)
        args: dict[str, Any] = {"app_id": app_id, "action": "delete", "confirm": True}
        await _tool(http, sid, "manage_app", args, 2)


async def _statuses(url: str, probes: int) -> list[int]:
    parts = urlsplit(url)
    found = []
    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(probes):
            answer = await client.get(
                f"http://127.0.0.1:{parts.port}/", headers={"host": parts.netloc}
            )
            found.append(answer.status_code)
            await asyncio.sleep(0.1)
    return found


@pytest.mark.e2e
async def test_two_installs_with_default_settings_keep_out_of_each_others_apps(
    launch_appdeck: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("APPDECK_SANDBOX_CGROUP", raising=False)  # defaults: nothing set
    sources = tmp_path / "src"
    shutil.copytree(HELLO, sources / "hello")
    env = {"APPDECK_SOURCE_ROOTS": str(sources)}
    a = await launch_appdeck(tmp_path / "a", env=env)
    b = await launch_appdeck(tmp_path / "b", env=env)
    async with asyncio.timeout(240):
        app_a, _ = await _deploy_hello(a, sources / "hello")
        app_b, url_b = await _deploy_hello(b, sources / "hello")
        assert app_a == app_b == 1  # the same app id, the same release id "1-1"

        uids_a = _uids_of_apps_started_by(a.process.pid, "python3 app.py")
        uids_b = _uids_of_apps_started_by(b.process.pid, "python3 app.py")
        assert len(uids_a) == len(uids_b) == 1, (uids_a, uids_b)
        assert uids_a.isdisjoint(uids_b)
        for server, uids in ((a, uids_a), (b, uids_b)):
            install = json.loads((server.data_dir / "install.json").read_text())
            assert uids == {install["uid_base"] + 1}

        await _delete(a, app_a)
        assert await _statuses(url_b, PROBES) == [200] * PROBES
        assert b.running

        copy = tmp_path / "copy-of-a"
        with contextlib.suppress(shutil.Error):  # a file that went away while A ran
            shutil.copytree(a.data_dir, copy, symlinks=True)
        assert (copy / "install.json").is_file()
        with pytest.raises(RuntimeError, match="exited with 2") as refused:
            await launch_appdeck(copy)
        lines = [line for line in str(refused.value).splitlines() if "appdeck serve:" in line]
        assert len(lines) == 1, str(refused.value)
        assert f"data dir {a.data_dir.resolve()};" in lines[0]
        assert a.running
