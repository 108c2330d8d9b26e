"""Issue 12's must-show story through a real server process (sandboxed apps) and the official
MCP Python client: the fixture app deployed; discover_apis → list_apis → get_api_schema →
test_api, a passing call and a response that breaks its schema; the app's key required (no
key 401, a key 200, a revoked key 401, a rotated key's old value 401 and its new one 200);
every SSRF attempt refused, or (a redirect) reported without being followed, while a trap on
another local port sees nothing; a broken document refused with nothing stored, an unknown
operation not found, a huge body cut without an error."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import official_client
from tests.ingress.upstreams import Upstream

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"

BROKEN_APP = """\
import json, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DOCUMENT = {"openapi": "3.1.0", "info": {"title": "broken", "version": "1"},
            "paths": {"/x": {"get": {"responses": "many"}}}}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(DOCUMENT if self.path == "/openapi.json" else {"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


def _spec(source: Path) -> dict[str, Any]:
    return {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
    }


@pytest.mark.e2e
async def test_discover_list_schema_test_keys_ssrf_and_bad_input(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    shutil.copytree(HELLO, root / "hello")
    (root / "broken").mkdir()
    (root / "broken" / "app.py").write_text(BROKEN_APP)
    server = await launch_appdeck(env={"APPDECK_SOURCE_ROOTS": json.dumps([str(root)])})
    trap = await Upstream("trap").start()  # another local port: "another host"
    try:
        async with asyncio.timeout(240), official_client(server) as client:
            await client.list_tools()  # the client checks each result against its outputSchema

            async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                result = await client.call_tool(name, args)
                assert not result.is_error, result
                assert result.structured_content is not None
                return result.structured_content

            async def refused(name: str, args: dict[str, Any]) -> str:
                result = await client.call_tool(name, args)
                assert result.is_error, result
                assert result.structured_content is not None
                return str(result.structured_content["error"]["code"])

            async def test(app_id: int, method: str, path: str, **more: Any) -> dict[str, Any]:
                tested = await call(
                    "test_api", {"app_id": app_id, "method": method, "path": path, **more}
                )
                assert tested["untrusted"] is True
                assert tested["redirect_followed"] is False
                return tested

            # 1. the fixture app, live; its document discovered, listed, one operation read
            made = await call("register_app", {"name": "hello", "spec": _spec(root / "hello")})
            app_id = made["app_id"]
            live = await call("deploy_app", {"app_id": app_id, "wait_seconds": 60})
            assert live["state"] == "live", live
            found = await call("discover_apis", {"app_id": app_id})
            assert (found["version"], found["operations"], found["unchanged"]) == (1, 10, False)
            assert "GET /items/{item_id}" in found["changes"]["added"]
            listed = await call("list_apis", {})
            [entry] = listed["apis"]
            assert (entry["app_id"], entry["title"], entry["operations"]) == (app_id, "hello", 10)
            schema = await call(
                "get_api_schema", {"app_id": app_id, "path": "/items/{item_id}", "method": "GET"}
            )
            assert "item_id" in json.dumps(schema)

            # 2. a passing call, and a response that breaks its schema
            item = await test(app_id, "GET", "/items/{item_id}", path_params={"item_id": 5})
            assert item["status"] == 200
            assert json.loads(item["body"]) == {"id": 5, "name": "item 5"}
            assert item["validation"] == {"checked": True, "valid": True, "errors": []}
            broken = await test(app_id, "GET", "/broken")
            assert broken["status"] == 200
            assert broken["validation"]["valid"] is False
            assert broken["validation"]["errors"] == ["body/count: 'many' is not of type 'integer'"]

            # 3. the app requires a key: none 401, a key 200, revoked 401, rotated 401 then 200
            await call("set_app_spec", {"app_id": app_id, "spec": {"api_auth": "required"}})
            assert (await test(app_id, "GET", "/", without_key=True))["status"] == 401
            assert (await test(app_id, "GET", "/"))["request"]["key"] == "injected"
            key = await call("manage_api_key", {"action": "create", "app_id": app_id, "name": "a"})
            assert (await test(app_id, "GET", "/", api_key=key["api_key"]))["status"] == 200
            await call(
                "manage_api_key",
                {"action": "revoke", "app_id": app_id, "key_id": key["key"]["id"], "confirm": True},
            )
            assert (await test(app_id, "GET", "/", api_key=key["api_key"]))["status"] == 401
            old = await call("manage_api_key", {"action": "create", "app_id": app_id, "name": "b"})
            new = await call(
                "manage_api_key", {"action": "rotate", "app_id": app_id, "key_id": old["key"]["id"]}
            )
            assert (await test(app_id, "GET", "/", api_key=old["api_key"]))["status"] == 401
            assert (await test(app_id, "GET", "/", api_key=new["api_key"]))["status"] == 200
            await call("set_app_spec", {"app_id": app_id, "spec": {"api_auth": "none"}})

            # 4. SSRF: another host, the metadata address, other local ports, a redirect off
            # the app, a path that escapes the route
            for args in (
                {"path": "http://other/"},
                {"path": "//other/"},
                {"path": f"http://{trap.address}/"},
                {"path": "http://169.254.169.254/latest/meta-data/"},
                {"path": "//169.254.169.254/latest/meta-data/"},
                {"path": "http://127.0.0.1:22/"},
                {"path": "/healthz", "headers": {"Host": "169.254.169.254"}},
                {"path": "/healthz", "headers": {"Host": "127.0.0.1:5432"}},
                {"path": "/healthz", "headers": {"Host": trap.address}},
                {"path": "/items/{item_id}", "path_params": {"item_id": "../../admin"}},
                {"path": "/items/{item_id}", "path_params": {"item_id": "%2e%2e"}},
                {"path": "/items/..%2f..%2fopenapi.json"},
            ):
                code = await refused("test_api", {"app_id": app_id, "method": "GET", **args})
                assert code in ("invalid_argument", "not_found"), (args, code)
            for to in ("http://169.254.169.254/latest/meta-data/", f"http://{trap.address}/"):
                moved = await test(app_id, "GET", "/redirect", query={"to": to})
                assert (moved["status"], moved["location"]) == (302, to)
            metadata = await test(
                app_id, "GET", "/items/{item_id}", path_params={"item_id": "169.254.169.254"}
            )
            assert metadata["status"] == 404  # a segment on the app's route, the app's 404
            assert trap.seen == []

            # 5. bad input: a broken document (nothing stored), an unknown operation, a huge
            # body (cut, no error)
            other = await call("register_app", {"name": "broken", "spec": _spec(root / "broken")})
            assert (await call("deploy_app", {"app_id": other["app_id"], "wait_seconds": 60}))[
                "state"
            ] == "live"
            assert await refused("discover_apis", {"app_id": other["app_id"]}) == (
                "invalid_argument"
            )
            assert await call("list_apis", {}) == listed
            assert await refused(
                "test_api", {"app_id": other["app_id"], "method": "GET", "path": "/x"}
            ) == ("failed_precondition")
            assert await refused(
                "test_api", {"app_id": app_id, "method": "GET", "path": "/nope"}
            ) == ("not_found")
            big = await test(app_id, "GET", "/big", query={"kb": 4096})
            assert (big["status"], big["truncated"], big["body_bytes"]) == (200, True, 65536)
    finally:
        await trap.stop()
