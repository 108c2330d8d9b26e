"""Issue 11's story through a real server process (sandboxed builds and CI runs) and the
official MCP Python client, from a local bare repository: import_and_deploy → a live app;
CI configured with auto_deploy and require_green; a signed push → a green run → the new
commit deployed by itself; a bad signature refused; a red push → the deploy blocked, the old
commit still answering; whats_next right at each stage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import official_client
from tests.platform.repos.gitrepo import BareRepo, bare_repo
from tests.platform.repos.payloads import push_payload, sign

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
LABEL = '"APP_VERSION_LABEL", "v1"'


def _version_of(app_py: str, version: str) -> str:
    return app_py.replace(LABEL, f'"APP_VERSION_LABEL", "{version}"')


async def _version(http: httpx.AsyncClient, app_url: str) -> str:
    parts = urlsplit(app_url)
    r = await http.get(f"http://127.0.0.1:{parts.port}/", headers={"host": parts.netloc})
    return str(r.json()["version"])


async def _push(http: httpx.AsyncClient, base: str, app_id: int, secret: str, sha: str) -> int:
    body = push_payload(sha, "a change")
    headers = {
        "x-github-event": "push",
        "content-type": "application/json",
        "x-hub-signature-256": sign(secret, body),
    }
    r = await http.post(f"{base}/hooks/git/{app_id}", content=body, headers=headers)
    return r.status_code


@pytest.mark.e2e
async def test_import_then_ci_then_green_and_red_pushes_with_whats_next_at_each_stage(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    repo: BareRepo = bare_repo(root, "hello.git")
    app_py = HELLO.joinpath("app.py").read_text()
    assert LABEL in app_py
    first = repo.commit({"app.py": app_py, "status": "green\n"}, "hello v1")
    server = await launch_appdeck(env={"APPDECK_SOURCE_ROOTS": json.dumps([str(root)])})
    base = server.url.removesuffix("/mcp")
    async with asyncio.timeout(240), official_client(server) as client, httpx.AsyncClient() as http:

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, args)
            assert not result.is_error, result
            assert result.structured_content is not None
            return result.structured_content

        async def run_ended(app_id: int, number: int) -> dict[str, Any]:
            for _ in range(1200):  # bounded by the timeout above too
                runs = (await call("manage_ci", {"action": "runs", "app_id": app_id}))["runs"]
                found = [r for r in runs if r["number"] == number]
                ended = found and found[0]["state"] not in ("queued", "running")
                if ended and (found[0]["state"] != "passed" or found[0]["deployment"] is not None):
                    return found[0]
                await asyncio.sleep(0.1)
            raise AssertionError(f"CI run {number} did not end")

        # 1. import_and_deploy: a live app answering through the ingress
        imported = await call(
            "import_and_deploy", {"url": f"file://{repo.bare}", "wait_seconds": 60}
        )
        app_id, secret = imported["app_id"], imported["webhook_secret"]
        assert imported["deployment"]["state"] == "live", imported
        assert imported["commit"] == first
        assert await _version(http, imported["url"]) == "v1"
        advice = await call("whats_next", {"app_id": app_id})
        assert advice["status"] == "ok", advice
        assert "manage_ci" in {s["tool"] for s in advice["steps"]}  # the improvement left

        # 2. CI: green runs deploy themselves; nothing red gets deployed
        await call(
            "manage_ci",
            {
                "action": "configure",
                "app_id": app_id,
                "test_command": "grep -qx green status",
                "auto_deploy": True,
                "require_green": True,
                "timeout_seconds": 120,
            },
        )

        # 3. a signed push of a green commit: tested, then deployed by itself
        second = repo.commit({"app.py": _version_of(app_py, "v2")}, "hello v2")
        body = push_payload(second, "hello v2")
        bad = await http.post(
            f"{base}/hooks/git/{app_id}",
            content=body,
            headers={"x-github-event": "push", "x-hub-signature-256": sign("guess", body)},
        )
        assert bad.status_code == 401
        assert await _push(http, base, app_id, secret, second) == 202
        green = await run_ended(app_id, 1)
        assert (green["state"], green["commit"]) == ("passed", second), green
        for _ in range(600):
            if await _version(http, imported["url"]) == "v2":
                break
            await asyncio.sleep(0.1)
        assert await _version(http, imported["url"]) == "v2"
        assert (await call("whats_next", {"app_id": app_id}))["status"] == "ok"

        # 4. a red commit: its run fails, nothing is deployed, whats_next points at its log
        third = repo.commit({"app.py": _version_of(app_py, "v3"), "status": "red\n"}, "v3")
        assert await _push(http, base, app_id, secret, third) == 202
        red = await run_ended(app_id, 2)
        assert (red["state"], red["deployment"]) == ("failed", None), red
        refused = await client.call_tool("deploy_app", {"app_id": app_id, "wait_seconds": 5})
        assert refused.is_error
        assert refused.structured_content is not None
        assert "no passing CI run" in refused.structured_content["error"]["message"]
        assert await _version(http, imported["url"]) == "v2"
        advice = await call("whats_next", {"app_id": app_id})
        assert advice["status"] == "ci_failed", advice
        first_step = advice["steps"][0]
        assert (first_step["tool"], first_step["arguments"]) == (
            "manage_ci",
            {"action": "logs", "app_id": app_id, "number": 2},
        )
        log = await call("manage_ci", first_step["arguments"])
        assert log["state"] == "failed"
