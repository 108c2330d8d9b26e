"""manage_table and alter_table through the official Python SDK client (mcp) against a real
``appdeck serve``, on SQLite and PostgreSQL: create → alter → describe → drop. The SDK checks
every structuredContent against the tool's outputSchema (it raises when one does not fit);
drop is confirmed through elicitation, which this client supports."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.conftest import Launcher
from tests.support.appdeck_process import AppDeckProcess

COLUMNS = [
    {"name": "title", "type": "text", "nullable": False, "default": "untitled"},
    {"name": "body", "type": "text"},
    {"name": "code", "type": "text"},
    {"name": "meta", "type": "json", "default": {"tags": []}},
]


@asynccontextmanager
async def _client(server: AppDeckProcess, asked: list[str]) -> AsyncIterator[Client]:
    async def confirm(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    http = httpx2.AsyncClient(headers=server.auth_headers, timeout=httpx2.Timeout(10, read=60))
    async with http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, mode="legacy", elicitation_callback=confirm) as client:
            yield client


async def _ok(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result: types.CallToolResult = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, arguments, result)
    assert result.structured_content is not None
    return dict(result.structured_content)


async def _error(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result: types.CallToolResult = await client.call_tool(tool, arguments)
    assert result.is_error, (tool, arguments, result)
    assert result.structured_content is not None
    return dict(result.structured_content["error"])


@pytest.fixture(params=["sqlite", "postgresql"])
async def server(request: pytest.FixtureRequest, launch_appdeck: Launcher) -> AppDeckProcess:
    if request.param == "sqlite":
        return await launch_appdeck()
    url = str(request.getfixturevalue("postgres_module_database"))
    prefix = f"t{secrets.token_hex(4)}_app_"  # roles are the cluster's: one prefix per test
    return await launch_appdeck(
        env={"APPDECK_DATABASE_URL": url, "APPDECK_APPS_ROLE_PREFIX": prefix}
    )


@pytest.mark.e2e
async def test_create_alter_describe_and_drop_through_the_python_sdk(
    server: AppDeckProcess,
) -> None:
    asked: list[str] = []
    async with asyncio.timeout(90), _client(server, asked) as client:
        app_id = (await _ok(client, "register_app", name="flow"))["app_id"]
        notes = {"app_id": app_id, "table": "notes"}
        made = await _ok(
            client,
            "manage_table",
            action="create",
            **notes,
            columns=COLUMNS,
            indexes=[{"columns": ["code"], "name": "by_code"}],
            fulltext=["title", "body"],
        )
        assert made["fulltext"] == ["title", "body"]
        await _ok(
            client,
            "records",
            action="insert",
            **notes,
            rows=[{"title": "a", "code": "7"}, {"title": "b", "code": "x"}],
        )
        changes = [
            {"op": "add_column", "definition": {"name": "stars", "type": "integer", "default": 0}},
            {"op": "rename_column", "column": "body", "new_name": "text"},
            {"op": "change_type", "column": "code", "type": "integer"},
        ]
        plan = await _ok(client, "alter_table", **notes, changes=changes, dry_run=True)
        assert plan["applied"] is False
        assert any(step["rewrites_table"] for step in plan["plan"])
        failed = await _error(client, "alter_table", **notes, changes=changes)
        assert failed["code"] == "invalid_argument"  # 'x' is no integer: nothing changed
        before = await _ok(client, "manage_table", action="describe", **notes)
        assert [c["name"] for c in before["columns"]] == ["id", "title", "body", "code", "meta"]
        await _ok(
            client,
            "records",
            action="delete",
            **notes,
            filter={"column": "code", "op": "eq", "value": "x"},
        )
        done = await _ok(client, "alter_table", **notes, changes=changes)
        assert done["applied"] is True
        described = await _ok(client, "manage_table", action="describe", **notes)
        types_of = {c["name"]: c["type"] for c in described["columns"]}
        assert types_of == {
            "id": "integer",
            "title": "text",
            "text": "text",
            "code": "integer",
            "meta": "json",
            "stars": "integer",
        }
        assert described["fulltext"] == ["title", "text"]
        assert described["indexes"] == [{"name": "by_code", "columns": ["code"], "unique": False}]
        assert described["row_estimate"] == 1
        found = await _ok(client, "search_table", **notes, query="a")
        assert [hit["row"]["id"] for hit in found["rows"]] == [1]

        assert (
            await _error(client, "manage_table", action="describe", app_id=app_id, table="nope")
        )["code"] == "not_found"
        bad = await _error(
            client,
            "manage_table",
            action="describe",
            app_id=app_id,
            table="x'; DROP TABLE notes; --",
        )
        assert bad["code"] == "invalid_argument"
        assert bad["details"]["field"] == "table"

        dropped = await _ok(client, "manage_table", action="drop", **notes)
        assert dropped["dropped"] is True
        assert asked
        assert "notes" in asked[0]
        listed = await _ok(client, "manage_table", action="list", app_id=app_id)
        assert listed["tables"] == []
