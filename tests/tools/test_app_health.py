"""An app's health through the MCP surface with real processes: the status resource (read
and subscribed), manage_app get's health and list_my_apps' brief, after an app exits with
status 3 and after it is OOM-killed at its memory limit (real sandbox, real cgroups)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

import httpx

from .conftest import Caller, World

EXITS = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "exits"


async def _get(world: World, path: str) -> int:
    """GET ``path`` from the app through the ingress (it may die answering): the status."""
    assert world.services.ingress is not None
    with contextlib.suppress(httpx.HTTPError):
        async with httpx.AsyncClient(timeout=20) as http:
            answer = await http.get(
                f"http://127.0.0.1:{world.services.ingress.port}{path}",
                headers={"host": "exits--acme.localhost"},
            )
            return answer.status_code
    return 0


async def _status(alice: Caller, app_id: int) -> dict[str, Any]:
    read = await alice.rpc("resources/read", {"uri": f"appdeck://apps/{app_id}/status"})
    return dict(json.loads(read["result"]["contents"][0]["text"]))


async def _until(alice: Caller, app_id: int, done: Any) -> dict[str, Any]:
    """The status once ``done(status)`` holds (bounded: 60 s; else the last one, failing)."""
    status: dict[str, Any] = {}
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(60):
            while True:
                status = await _status(alice, app_id)
                if done(status):
                    return status
                await asyncio.sleep(0.2)
    raise AssertionError(f"not reached; last status: {status}")


async def test_the_status_resource_reports_an_exit_status_and_an_oom_kill(
    deploy_world: World,
) -> None:
    world = deploy_world
    source = world.source.parent / "exits"
    shutil.copytree(EXITS, source)
    alice = await world.caller("alice")
    spec = {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "resources": {"memory_mb": 64},
    }
    app_id = (await alice.ok("register_app", name="exits", spec=spec))["app_id"]
    deployed = await alice.ok("deploy_app", app_id=app_id, wait_seconds=60)
    assert deployed["state"] == "live", deployed
    uri = f"appdeck://apps/{app_id}/status"
    listed = await alice.rpc("resources/list")
    assert uri in {r["uri"] for r in listed["result"]["resources"]}
    assert (await alice.rpc("resources/subscribe", {"uri": uri}))["result"] == {}

    fresh = await _status(alice, app_id)
    assert fresh["state"] == "running"
    assert fresh["live"]["number"] == 1
    assert fresh["instances"] == {"up": 1, "desired": 1}
    [instance] = fresh["instance_details"]
    assert (instance["restarts"], instance["last_exit"]) == (0, None)
    assert instance["memory_bytes"] > 0  # the sandbox's cgroup

    await _get(world, "/exit?code=3")
    crashed = await _until(
        alice, app_id, lambda s: s["restarts"] == 1 and s["instances"]["up"] == 1
    )
    assert crashed["instance_details"][0]["last_exit"] == "status 3"

    for _ in range(150):  # the restarted instance is reached again (a new namespace)
        if await _get(world, "/healthz") == 200:
            break
        await asyncio.sleep(0.2)
    await _get(world, "/hog?mb=256")
    killed = await _until(alice, app_id, lambda s: s["restarts"] == 2 and s["instances"]["up"] == 1)
    [instance] = killed["instance_details"]
    assert instance["oom_kills"] >= 1
    assert instance["last_exit"] == "signal SIGKILL"

    await world.services.platform.health.settle()
    events = await world.services.hub.log.replay(alice.session, "g", 0)
    updated = [
        e
        for e in (json.loads(x.payload) for x in events)
        if e.get("method") == "notifications/resources/updated" and e["params"]["uri"] == uri
    ]
    assert len(updated) >= 2  # each crash (and each restart) told the subscriber

    got = await alice.ok("manage_app", app_id=app_id, action="get")
    assert got["health"]["restarts"] == 2
    assert got["health"]["instance_details"][0]["oom_kills"] >= 1
    [listed_app] = (await alice.ok("list_my_apps"))["apps"]
    assert listed_app["health"] == {"state": "running", "up": 1, "desired": 1, "restarts": 2}
