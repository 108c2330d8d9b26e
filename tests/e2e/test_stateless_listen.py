"""The official MCP Python client's ``Client.listen`` (mcp 2.3.0, 2026-07-28) against a real
``appdeck serve`` with the stateless era on: the ack's honoured filter, a tool-list change
from the conformance trigger, and platform changes (an app created, an app deleted) arriving
as typed events on the open stream."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from mcp.shared.subscriptions import (
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from tests.e2e.conftest import Launcher
from tests.e2e.test_stateless_client import client_of, structured
from tests.support.wait import until


@pytest.mark.e2e
async def test_the_official_client_hears_tool_and_app_changes_on_a_listen_stream(
    launch_appdeck: Launcher,
) -> None:
    server = await launch_appdeck()
    async with asyncio.timeout(90), client_of(server, "auto", [], [], answer=True) as client:
        assert client.protocol_version == "2026-07-28"
        app = structured(await client.call_tool("register_app", {"name": "shop"}))
        uri = f"appdeck://apps/{app['app_id']}"
        events: list[ServerEvent] = []
        async with client.listen(
            tools_list_changed=True,
            resources_list_changed=True,
            resource_subscriptions=[uri, "appdeck://apps/999999"],
        ) as sub:
            assert sub.honored.tools_list_changed is True
            assert sub.honored.resources_list_changed is True
            assert list(sub.honored.resource_subscriptions or []) == [uri]

            async def collect() -> None:
                async for event in sub:
                    events.append(event)

            reader = asyncio.create_task(collect())
            try:
                await client.call_tool("test_trigger_tool_change", {})
                await until(lambda: ToolsListChanged() in events, within=30)
                structured(await client.call_tool("register_app", {"name": "other"}))
                await until(lambda: ResourcesListChanged() in events, within=30)
                gone = await client.call_tool(
                    "manage_app", {"app_id": app["app_id"], "action": "delete"}
                )
                assert structured(gone)["deleted"] is True
                await until(lambda: ResourceUpdated(uri) in events, within=30)
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        assert all(
            isinstance(e, (ToolsListChanged, ResourcesListChanged, ResourceUpdated)) for e in events
        )
