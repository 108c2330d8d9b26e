"""AppDeck's long-running tools as tasks of the tasks extension (MCP 2026-07-28): a stateless
client that declares the extension gets a task and polls ``tasks/get``; one that does not
gets the answer at once."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.stateless import StatelessCaller

from .conftest import ALL, World

WITH_TASKS = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
LONG_RUNNING = ("deploy_app", "import_and_deploy", "manage_ci", "discover_apis")


async def caller(world: World, capabilities: dict[str, Any]) -> StatelessCaller:
    token, _ = await world.admin.mint_access_token("acme", "bob", ALL)
    return StatelessCaller(world.client, token, capabilities)


async def ended(bob: StatelessCaller, task_id: str) -> dict[str, Any]:
    """tasks/get until the task ended (bounded), as a client polls."""
    async with asyncio.timeout(30):
        while True:
            task: dict[str, Any] = (await bob.rpc("tasks/get", {"taskId": task_id}))["result"]
            if task["status"] in ("completed", "failed", "cancelled"):
                return task
            await asyncio.sleep(0.05)


async def test_the_long_running_tools_run_as_tasks_for_a_client_that_declares_them(
    world: World,
) -> None:
    bob = await caller(world, WITH_TASKS)
    for tool in LONG_RUNNING:
        # arguments the tool refuses: the refusal is the task's (tool error) result
        created = (await bob.call(tool, {"app_id": 987654}))["result"]
        assert created["resultType"] == "task", (tool, created)
        done = await ended(bob, created["taskId"])
        assert done["status"] == "completed", (tool, done)
        assert done["result"]["isError"] is True


async def test_without_the_extension_the_same_call_answers_at_once(world: World) -> None:
    bob = await caller(world, {"elicitation": {}})
    for tool in LONG_RUNNING:
        result = (await bob.call(tool, {"app_id": 987654}))["result"]
        assert result["resultType"] == "complete", (tool, result)
        assert result["isError"] is True
