"""Issue 21 §1 through a real ``appdeck serve`` with ``APPDECK_DATA_PLANE=haproxy``: an app
that requires an API key, deployed with the official MCP client, is served through HAProxy
with its key and refused without it; a revoked key stops at once; and HAProxy keeps checking
keys after ``appdeck serve`` was killed (it outlives it, with the keys it was last given)."""

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
from tests.support.mcp import free_port

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"


@pytest.mark.e2e
async def test_an_app_that_requires_a_key_is_served_through_haproxy_with_it_only(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    shutil.copytree(HELLO, root / "hello")
    server = await launch_appdeck(
        env={"APPDECK_SOURCE_ROOTS": json.dumps([str(root)]), "APPDECK_DATA_PLANE": "haproxy"}
    )
    install = json.loads((server.data_dir / "install.json").read_text())["id"]
    assert (Path("/run/appdeck") / install / "haproxy" / "haproxy.pid").exists()
    async with asyncio.timeout(240), official_client(server) as client:

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, args)
            assert not result.is_error, result
            assert result.structured_content is not None
            return result.structured_content

        spec = {
            "source_path": str(root / "hello"),
            "run_command": "python3 app.py",
            "health_check": {"path": "/healthz", "timeout_s": 2},
            "api_auth": "required",
        }
        app_id = (await call("register_app", {"name": "hello", "spec": spec}))["app_id"]
        live = await call("deploy_app", {"app_id": app_id, "wait_seconds": 60})
        assert live["state"] == "live", live
        made = await call("manage_api_key", {"action": "create", "app_id": app_id, "name": "a"})
        other = await call("manage_api_key", {"action": "create", "app_id": app_id, "name": "b"})
        url = urlsplit((await call("get_app_url", {"app_id": app_id}))["url"])
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{url.port}", headers={"host": url.netloc}, timeout=10
        ) as http:
            assert (await http.get("/")).status_code == 401
            assert (await http.get("/", headers={"x-api-key": "adk_key_nope"})).status_code == 401
            served = await http.get("/", headers={"x-api-key": made["api_key"]})
            assert served.status_code == 200, served.text
            bearer = {"authorization": f"Bearer {made['api_key']}"}  # the Lua step's shape
            assert (await http.get("/", headers=bearer)).status_code == 200
            await call(
                "manage_api_key",
                {
                    "action": "revoke",
                    "app_id": app_id,
                    "key_id": made["key"]["id"],
                    "confirm": True,
                },
            )
            assert (await http.get("/", headers={"x-api-key": made["api_key"]})).status_code == 401
    await server.kill()  # HAProxy outlives appdeck serve, with the keys it was given
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{url.port}", headers={"host": url.netloc}, timeout=10
    ) as http:
        assert (await http.get("/", headers={"x-api-key": other["api_key"]})).status_code == 200
        assert (await http.get("/")).status_code == 401
        assert (await http.get("/", headers={"x-api-key": made["api_key"]})).status_code == 401


@pytest.mark.e2e
async def test_the_control_plane_at_its_https_public_url_is_served_through_haproxy(
    launch_appdeck: Launcher,
) -> None:
    https_port = free_port()
    public = f"https://appdeck.example.test:{https_port}"
    server = await launch_appdeck(
        env={
            "APPDECK_DATA_PLANE": "haproxy",
            "APPDECK_PUBLIC_URL": public,
            "APPDECK_HTTPS_PORT": str(https_port),
        }
    )
    async with httpx.AsyncClient(
        base_url=f"https://127.0.0.1:{https_port}",
        headers={"host": f"appdeck.example.test:{https_port}"},
        verify=False,  # HAProxy's default certificate: nothing issued in this test
        timeout=10,
    ) as http:
        r = await http.get("/.well-known/oauth-protected-resource")
        assert r.status_code == 200, r.text  # at once: uvicorn through HAProxy (TLS ends there)
        assert r.json()["resource"] == f"{public}/mcp"
        assert (await http.get("/healthz")).json()["status"] == "ok"
    assert server.running
