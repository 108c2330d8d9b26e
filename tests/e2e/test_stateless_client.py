"""The official MCP Python client (mcp 2.3.0, ``mode="auto"``: it probes ``server/discover``)
against a real ``appdeck serve`` with the stateless era on: it adopts 2026-07-28 and works
without a session; pinned to the handshake (``mode="legacy"``) the same story runs on
2025-11-25. Confirmations reach the client's elicitation callback in both eras."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.conftest import Launcher
from tests.support.appdeck_process import AppDeckProcess

ERA = {"auto": "2026-07-28", "legacy": "2025-11-25"}


@contextlib.asynccontextmanager
async def client_of(
    server: AppDeckProcess, mode: str, asked: list[str], sent: list[httpx2.Request], answer: bool
) -> AsyncIterator[Client]:
    async def record(req: httpx2.Request) -> None:
        sent.append(req)

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        if not answer:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"confirm": True})

    http = httpx2.AsyncClient(
        headers=server.auth_headers,
        timeout=httpx2.Timeout(10, read=60),
        event_hooks={"request": [record]},
    )
    async with http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, mode=mode, elicitation_callback=elicit) as client:
            yield client


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_registers_and_deletes_an_app_with_a_confirmation_in_either_era(
    launch_appdeck: Launcher, mode: str
) -> None:
    server = await launch_appdeck()
    asked: list[str] = []
    sent: list[httpx2.Request] = []
    async with asyncio.timeout(60), client_of(server, mode, asked, sent, answer=True) as client:
        assert client.protocol_version == ERA[mode]
        assert "whats_next" in (client.instructions or "")
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"register_app", "manage_app", "whats_next", "deploy_app"} <= names
        app = structured(await client.call_tool("register_app", {"name": "shop"}))
        got = structured(
            await client.call_tool("manage_app", {"app_id": app["app_id"], "action": "get"})
        )
        assert got["name"] == "shop"
        gone = await client.call_tool("manage_app", {"app_id": app["app_id"], "action": "delete"})
        assert structured(gone)["deleted"] is True
        assert len(asked) == 1
        assert "shop" in asked[0]
        listed = structured(await client.call_tool("list_my_apps", {}))
        assert listed["apps"] == []
    posts = [r for r in sent if r.method == "POST"]
    sessions = {r.headers.get("mcp-session-id") for r in posts}
    if mode == "auto":
        assert sessions == {None}  # no session, ever
        assert all(r.headers.get("mcp-method") for r in posts)
        assert not [r for r in sent if r.method == "GET"]  # no standalone stream
    else:
        assert len(sessions - {None}) == 1


@pytest.mark.e2e
async def test_a_declined_confirmation_leaves_the_app_for_a_stateless_client(
    launch_appdeck: Launcher,
) -> None:
    server = await launch_appdeck()
    asked: list[str] = []
    sent: list[httpx2.Request] = []
    async with asyncio.timeout(60), client_of(server, "auto", asked, sent, answer=False) as client:
        app = structured(await client.call_tool("register_app", {"name": "keep"}))
        kept = await client.call_tool("manage_app", {"app_id": app["app_id"], "action": "delete"})
        assert kept.is_error
        assert "not confirmed" in str(kept.content[0])
        assert len(asked) == 1
        got = structured(
            await client.call_tool("manage_app", {"app_id": app["app_id"], "action": "get"})
        )
        assert got["name"] == "keep"


@pytest.mark.e2e
async def test_without_the_stateless_era_the_same_client_falls_back_to_the_handshake(
    launch_appdeck: Launcher,
) -> None:
    appdeck = await launch_appdeck(env={"APPDECK_STATELESS_ERA": "false"})
    sent: list[httpx2.Request] = []
    async with asyncio.timeout(60), client_of(appdeck, "auto", [], sent, answer=True) as client:
        assert client.protocol_version == "2025-11-25"
        assert (await client.call_tool("test_simple_text", {})).content
