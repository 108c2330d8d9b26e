"""Deployments through a real server process: a subscriber follows every state change, and a
kill -9 in the middle of a deploy leaves the live app answering and the task terminal."""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import mcp.types as types
import pytest

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import (
    Inbox,
    hello_source,
    official_client,
    raw_http,
    rpc,
    through_ingress,
)
from tests.support.mcp import initialize


async def _tool(http: httpx.AsyncClient, sid: str, name: str, args: dict[str, Any], id: int) -> Any:
    reply = await rpc(http, sid, "tools/call", {"name": name, "arguments": args}, id=id)
    result = reply["result"]
    assert not result.get("isError"), result
    return result["structuredContent"]


def _spec(source: Path, **extra: Any) -> dict[str, Any]:
    return {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        **extra,
    }


@pytest.mark.e2e
async def test_a_subscriber_hears_every_deployment_state_change(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    source, env = hello_source(tmp_path)
    server = await launch_appdeck(env=env)
    inbox = Inbox()
    async with asyncio.timeout(60), official_client(server, inbox) as client:
        made = await client.call_tool("register_app", {"name": "hello", "spec": _spec(source)})
        assert not made.is_error, made
        app_id = made.structured_content["app_id"]
        uri = f"appdeck://apps/{app_id}/deployments"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK marks subscribe deprecated for 2026-07-28
            await client.session.subscribe_resource(uri)
        deployed = await client.call_tool(
            "deploy_app", {"app_id": app_id, "strategy": "rolling", "wait_seconds": 60}
        )
        assert deployed.structured_content["state"] == "live", deployed
        updates = [
            n for n in inbox.of(types.ResourceUpdatedNotification) if str(n.params.uri) == uri
        ]
        for _ in range(50):
            if len(updates) >= 5:
                break
            await asyncio.sleep(0.1)
            updates = [
                n for n in inbox.of(types.ResourceUpdatedNotification) if str(n.params.uri) == uri
            ]
        listed = await client.call_tool("list_deployments", {"app_id": app_id})
        steps = listed.structured_content["deployments"][0]
        assert steps["state"] == "live"
        # queued, building, starting, instance steps, live: one notification per change at least
        assert len(updates) >= 4, [str(n.params.uri) for n in updates]
        got = await client.read_resource(uri)
        body = json.loads(got.contents[0].text)  # type: ignore[union-attr]
        assert body["deployments"][0]["state"] == "live"
    await _tool_cleanup(server, app_id)


@pytest.mark.e2e
async def test_a_kill_during_a_deploy_keeps_the_live_app_and_ends_the_task(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    source, env = hello_source(tmp_path)
    async with asyncio.timeout(90):
        first = await launch_appdeck(env=env)
        async with raw_http(first) as http:
            sid = await initialize(http)
            app = await _tool(
                http, sid, "register_app", {"name": "hello", "spec": _spec(source)}, 2
            )
            app_id = app["app_id"]
            live = await _tool(http, sid, "deploy_app", {"app_id": app_id, "wait_seconds": 60}, 3)
            assert live["state"] == "live", live
            # a slow release: it sits in "starting" while we pull the plug
            await _tool(
                http,
                sid,
                "env_vars",
                {"app_id": app_id, "action": "set", "name": "SLOW_START_S", "value": "20"},
                4,
            )
            started = await rpc(
                http,
                sid,
                "tools/call",
                {
                    "name": "deploy_app",
                    "arguments": {"app_id": app_id, "strategy": "blue_green"},
                    "task": {},
                },
                id=5,
            )
            task_id = started["result"]["task"]["taskId"]
            for _ in range(100):
                listed = await _tool(http, sid, "list_deployments", {"app_id": app_id}, 6)
                if listed["deployments"][0]["state"] == "starting":
                    break
                await asyncio.sleep(0.1)
            assert listed["deployments"][0]["state"] == "starting", listed

        await first.kill()

        second = await launch_appdeck(data_dir=first.data_dir, env=env)
        async with raw_http(second) as http:
            sid = await initialize(http)
            url = await _tool(http, sid, "get_app_url", {"app_id": app_id}, 2)
            assert urlsplit(url["url"]).hostname == "hello--dev.localhost"  # <app>--<tenant>
            async with httpx.AsyncClient(timeout=5) as probe:
                answer = await probe.get(**through_ingress(url["url"]))
            assert answer.status_code == 200, answer.text  # the live release was re-adopted
            listed = await _tool(http, sid, "list_deployments", {"app_id": app_id}, 3)
            assert [d["state"] for d in listed["deployments"]] == ["failed", "live"], listed
            task = await rpc(http, sid, "tasks/get", {"taskId": task_id}, id=4)
            assert task["result"]["status"] == "failed", task
        await _tool_cleanup(second, app_id)


async def _tool_cleanup(server: Any, app_id: int) -> None:
    """Delete the app so its processes stop (the server keeps apps running across restarts)."""
    async with raw_http(server) as http:
        sid = await initialize(http)
        await _tool(
            http, sid, "manage_app", {"app_id": app_id, "action": "delete", "confirm": True}, 9
        )


@pytest.mark.e2e
async def test_the_official_client_deploys_the_fixture_app_with_every_strategy_as_tasks(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    from tests.e2e.helpers import call_tool_as_task, task_result

    source, env = hello_source(tmp_path)
    server = await launch_appdeck(env=env)
    async with asyncio.timeout(120), official_client(server) as client:
        made = await client.call_tool(
            "register_app", {"name": "hello", "spec": {"runtime": "python"}}
        )
        app_id = made.structured_content["app_id"]
        spec = await client.call_tool(
            "set_app_spec",
            {
                "app_id": app_id,
                "spec": _spec(
                    source,
                    instances=2,
                    canary={"percent": 20, "steps": [20, 100], "analysis_window_s": 1},
                ),
            },
        )
        assert spec.structured_content["changed"] is True
        await client.call_tool(
            "env_vars", {"app_id": app_id, "action": "set", "name": "GREETING", "value": "hej"}
        )
        preflight = await client.call_tool("preflight_check", {"app_id": app_id})
        assert preflight.structured_content["verdict"] != "fail", preflight
        url = (await client.call_tool("get_app_url", {"app_id": app_id})).structured_content["url"]
        for strategy in ("recreate", "rolling", "blue_green", "canary"):
            created = await call_tool_as_task(
                client, "deploy_app", {"app_id": app_id, "strategy": strategy}
            )
            assert created.task.status == "working"
            result = await task_result(client, created.task.task_id, read_timeout=60)
            assert result.structured_content["state"] == "live", (strategy, result)
            async with httpx.AsyncClient(timeout=5) as http:
                answer = await http.get(**through_ingress(url))
            assert answer.json()["greeting"] == "hej", strategy
        listed = await client.call_tool("list_deployments", {"app_id": app_id})
        assert [d["state"] for d in listed.structured_content["deployments"]][:2] == [
            "live",
            "superseded",
        ]
        logs = await client.call_tool("tail_deploy_logs", {"app_id": app_id, "lines": 20})
        assert logs.structured_content["lines"]
        restarted = await client.call_tool("restart_app", {"app_id": app_id})
        assert restarted.structured_content["state"] == "live"
        rolled = await client.call_tool("rollback_deploy", {"app_id": app_id})
        assert rolled.structured_content["state"] == "live"
        assert rolled.structured_content["number"] == 3
    await _tool_cleanup(server, app_id)
