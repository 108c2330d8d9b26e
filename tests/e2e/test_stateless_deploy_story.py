"""Issue 22's deploy story in the stateless era (MCP 2026-07-28), over raw HTTP against a real
``appdeck serve``: discover, register, a canary deploy as a task (tasks extension) followed on
two listen streams (the deployments resource and the task), the app answering through the data
plane, then its deletion confirmed through an input-required round. No session anywhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import hello_source, through_ingress
from tests.support.appdeck_process import AppDeckProcess
from tests.support.stateless import body, routing
from tests.support.wait import until

pytestmark = pytest.mark.e2e
TASKS = "io.modelcontextprotocol/tasks"
CAPS = {"elicitation": {}, "extensions": {TASKS: {}}}


class Stateless:
    def __init__(self, http: httpx.AsyncClient, server: AppDeckProcess) -> None:
        self.http, self.server = http, server

    def headers(self, method: str, name: str | None = None) -> dict[str, str]:
        return {**routing(method, name), **self.server.auth_headers}

    async def rpc(self, method: str, params: dict[str, Any], name: str | None = None) -> Any:
        r = await self.http.post(
            "/mcp", json=body(method, params, capabilities=CAPS), headers=self.headers(method, name)
        )
        assert r.status_code == 200, r.text
        reply = r.json()
        assert "result" in reply, reply
        return reply["result"]

    async def tool(self, name: str, arguments: dict[str, Any], **extra: Any) -> Any:
        return await self.rpc("tools/call", {"name": name, "arguments": arguments, **extra}, name)


@contextlib.asynccontextmanager
async def listen(
    s: Stateless, notifications: dict[str, Any], into: list[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    """A listen stream whose frames land in ``into``; yields the ack's honoured filter."""
    acked: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def read() -> None:
        payload = body("subscriptions/listen", {"notifications": notifications}, capabilities=CAPS)
        headers = s.headers("subscriptions/listen")
        async with s.http.stream("POST", "/mcp", json=payload, headers=headers) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                frame = json.loads(line[5:])
                if frame.get("method") == "notifications/subscriptions/acknowledged":
                    acked.set_result(frame["params"]["notifications"])
                else:
                    into.append(frame)

    reader = asyncio.create_task(read())
    try:
        yield await asyncio.wait_for(asyncio.shield(acked), 60)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await reader


async def test_the_deploy_story_runs_in_the_stateless_era(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    source, env = hello_source(tmp_path)
    server = await launch_appdeck(env=env)
    async with asyncio.timeout(400), httpx.AsyncClient(base_url=server.origin, timeout=60) as http:
        s = Stateless(http, server)
        found = await s.rpc("server/discover", {})
        assert "2026-07-28" in found["supportedVersions"]
        assert TASKS in found["capabilities"]["extensions"]
        made = await s.tool("register_app", {"name": "hello", "spec": {"runtime": "python"}})
        app_id = made["structuredContent"]["app_id"]
        spec = {
            "source_path": str(source),
            "run_command": "python3 app.py",
            "health_check": {"path": "/healthz", "timeout_s": 2},
            "instances": 2,
            "canary": {"percent": 20, "steps": [20, 100], "analysis_window_s": 1},
        }
        await s.tool("set_app_spec", {"app_id": app_id, "spec": spec})
        uri = f"appdeck://apps/{app_id}/deployments"
        updates: list[dict[str, Any]] = []
        statuses: list[dict[str, Any]] = []
        async with listen(s, {"resourceSubscriptions": [uri]}, updates) as honoured:
            assert honoured == {"resourceSubscriptions": [uri]}
            created = await s.tool("deploy_app", {"app_id": app_id, "strategy": "canary"})
            assert created["resultType"] == "task", created
            task_id = created["taskId"]
            async with listen(s, {"taskIds": [task_id]}, statuses):
                done = await s.rpc("tasks/get", {"taskId": task_id}, task_id)
                async with asyncio.timeout(300):  # a build and a canary on a loaded machine
                    while done["status"] not in ("completed", "failed", "cancelled"):
                        await asyncio.sleep(0.5)
                        done = await s.rpc("tasks/get", {"taskId": task_id}, task_id)
                assert done["status"] == "completed", done
                assert done["result"]["structuredContent"]["state"] == "live", done

                def told_of_the_end() -> bool:
                    return any(n["params"]["status"] == "completed" for n in statuses)

                await until(told_of_the_end, within=30, interval=0.2)
            await until(lambda: len(updates) >= 3, within=30, interval=0.2)
        assert {n["method"] for n in updates} == {"notifications/resources/updated"}
        assert {n["params"]["uri"] for n in updates} == {uri}
        assert {n["method"] for n in statuses} == {"notifications/tasks"}
        assert {n["params"]["taskId"] for n in statuses} == {task_id}

        url = (await s.tool("get_app_url", {"app_id": app_id}))["structuredContent"]["url"]
        async with httpx.AsyncClient(timeout=10) as probe:
            answer = await probe.get(**through_ingress(url))
        assert answer.status_code == 200, answer.text

        args = {"app_id": app_id, "action": "delete"}
        asked = await s.tool("manage_app", args)
        assert asked["resultType"] == "input_required", asked
        [key] = asked["inputRequests"]
        yes = {"action": "accept", "content": {"confirm": True}}
        gone = await s.tool(
            "manage_app", args, inputResponses={key: yes}, requestState=asked["requestState"]
        )
        assert gone["structuredContent"]["deleted"] is True, gone
