"""Issue 22's deploy story with the official Python client (mcp 2.3.0, ``mode="auto"``) in
the stateless era: the client has no tasks extension of its own, so the test gives it one
through the SDK's extension interface (``ClientExtension``: it declares
``io.modelcontextprotocol/tasks``, claims the ``task`` result and resolves it by polling
``tasks/get``, and observes ``notifications/tasks``). A canary deploy runs as a task; a
``Client.listen`` stream hears the deployments resource change; the app's deletion is
confirmed through the client's elicitation callback (an input-required round)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import hello_source, through_ingress

pytestmark = pytest.mark.e2e
TERMINAL = ("completed", "failed", "cancelled")


class TaskParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class DetailedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    result: dict[str, Any] | None = None


class CreatedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str


class TaskNote(types.NotificationParams):
    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str


class Tasks(ClientExtension):
    identifier = "io.modelcontextprotocol/tasks"

    def __init__(self) -> None:
        self.created: list[str] = []
        self.heard: list[TaskNote] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/tasks", params_type=TaskNote, handler=self._heard
            )
        ]

    async def _heard(self, note: TaskNote) -> None:
        self.heard.append(note)

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created.task_id)
        request = GetTask(params=TaskParams(task_id=created.task_id))
        task = await ctx.session.send_request(request, DetailedTask)
        async with asyncio.timeout(300):  # a build and a canary on a loaded machine
            while task.status not in TERMINAL:
                await asyncio.sleep(0.5)
                task = await ctx.session.send_request(request, DetailedTask)
        assert task.status == "completed", task
        assert task.result is not None
        return types.CallToolResult.model_validate(task.result)


async def test_the_official_client_deploys_as_a_task_and_confirms_a_delete_in_the_stateless_era(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    source, env = hello_source(tmp_path)
    server = await launch_appdeck(env=env)
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    tasks = Tasks()
    http = httpx2.AsyncClient(headers=server.auth_headers, timeout=httpx2.Timeout(10, read=120))
    async with asyncio.timeout(400), http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, elicitation_callback=elicit, extensions=[tasks]) as client:
            assert client.protocol_version == "2026-07-28"
            made = await client.call_tool(
                "register_app", {"name": "hello", "spec": {"runtime": "python"}}
            )
            app_id = made.structured_content["app_id"]  # type: ignore[index]
            spec = {
                "source_path": str(source),
                "run_command": "python3 app.py",
                "health_check": {"path": "/healthz", "timeout_s": 2},
                "instances": 2,
                "canary": {"percent": 20, "steps": [20, 100], "analysis_window_s": 1},
            }
            assert not (
                await client.call_tool("set_app_spec", {"app_id": app_id, "spec": spec})
            ).is_error
            uri = f"appdeck://apps/{app_id}/deployments"
            async with client.listen(resource_subscriptions=[uri]) as sub:
                deployed = await client.call_tool(
                    "deploy_app", {"app_id": app_id, "strategy": "canary"}
                )
                assert deployed.structured_content["state"] == "live", deployed  # type: ignore[index]
                async with asyncio.timeout(30):
                    async for event in sub:
                        if getattr(event, "uri", None) is not None and str(event.uri) == uri:
                            break
            assert len(tasks.created) == 1  # the deploy ran as a task
            url = (await client.call_tool("get_app_url", {"app_id": app_id})).structured_content[
                "url"
            ]  # type: ignore[index]
            async with httpx.AsyncClient(timeout=10) as probe:
                assert (await probe.get(**through_ingress(url))).status_code == 200
            gone = await client.call_tool("manage_app", {"app_id": app_id, "action": "delete"})
            assert gone.structured_content["deleted"] is True, gone  # type: ignore[index]
            assert len(asked) == 1
