"""connect_repo through a real server process (sandboxed builds): the fixture app in a local
bare repository is deployed from its commit, then a signed push deploys the next commit."""

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
from tests.e2e.helpers import official_client
from tests.platform.repos.gitrepo import bare_repo
from tests.platform.repos.payloads import push_payload, sign

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
SPEC = {"run_command": "python3 app.py", "health_check": {"path": "/healthz", "timeout_s": 2}}


async def _version(http: httpx.AsyncClient, app_url: str) -> str:
    parts = urlsplit(app_url)
    r = await http.get(f"http://127.0.0.1:{parts.port}/", headers={"host": parts.netloc})
    return str(r.json()["version"])


@pytest.mark.e2e
async def test_a_signed_push_deploys_the_new_commit_through_the_sandbox(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    repo = bare_repo(root, "hello.git")
    app_py = HELLO.joinpath("app.py").read_text()
    shutil.copy(HELLO / "README.md", repo.work / "README.md")
    first = repo.commit({"app.py": app_py}, "hello v1")
    server = await launch_appdeck(env={"APPDECK_SOURCE_ROOTS": json.dumps([str(root)])})
    base = server.url.removesuffix("/mcp")
    async with asyncio.timeout(120), official_client(server) as client, httpx.AsyncClient() as http:

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, args)
            assert not result.is_error, result
            assert result.structured_content is not None
            return result.structured_content

        app = await call("register_app", {"name": "hello", "spec": SPEC})
        app_id = app["app_id"]
        connect = {"action": "connect", "app_id": app_id, "url": f"file://{repo.bare}"}
        done = await call("connect_repo", {**connect, "auto_deploy": True})
        assert done["head"] == first
        live = await call("deploy_app", {"app_id": app_id, "wait_seconds": 60})
        assert live["state"] == "live", live
        assert live["source"]["commit"] == first
        assert await _version(http, live["url"]) == "v1"

        second = repo.commit(
            {"app.py": app_py.replace('"APP_VERSION_LABEL", "v1"', '"APP_VERSION_LABEL", "v2"')},
            "hello v2",
        )
        body = push_payload(second, "hello v2", before=first)
        headers = {"x-github-event": "push", "content-type": "application/json"}
        bad = await http.post(
            f"{base}/hooks/git/{app_id}",
            content=body,
            headers={**headers, "x-hub-signature-256": sign("guess", body)},
        )
        assert bad.status_code == 401
        hook = await http.post(
            f"{base}/hooks/git/{app_id}",
            content=body,
            headers={**headers, "x-hub-signature-256": sign(done["webhook_secret"], body)},
        )
        assert hook.status_code == 202, hook.text
        for _ in range(600):  # bounded by the timeout above too
            listed = await call("list_deployments", {"app_id": app_id})
            newest = listed["deployments"][0]
            if newest["number"] == 2 and newest["state"] not in ("queued", "building", "starting"):
                break
            await asyncio.sleep(0.1)
        assert newest["state"] == "live", newest
        assert newest["source"]["commit"] == second
        assert newest["source"]["message"] == "hello v2"
        assert await _version(http, live["url"]) == "v2"
        await call("manage_app", {"app_id": app_id, "action": "delete", "confirm": True})
