"""The deploy tools with real app processes and the real ingress router: the fixture app
(tests/fixtures/apps/hello) deployed with each strategy, fetched through the ingress, a bad
canary rolled back without one failed request on the old share, rollback, restart, logs."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from .conftest import Caller, World, fetch


async def deploy(alice: Caller, app_id: int, strategy: str) -> dict[str, Any]:
    return await alice.ok("deploy_app", app_id=app_id, strategy=strategy, wait_seconds=60)


async def test_the_fixture_app_goes_through_every_strategy(deploy_world: World) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    spec = {
        "source_path": str(world.source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "instances": 2,
        "canary": {
            "percent": 20,
            "steps": [20, 100],
            "analysis_window_s": 1.5,
            "max_error_rate": 0.2,
        },
    }
    app_id = (await alice.ok("register_app", name="hello", spec=spec))["app_id"]
    never_live = await fetch(world, "hello")  # registered, never live: says so (issue 20)
    assert never_live.status_code == 503
    assert "not deployed yet" in never_live.text
    await alice.ok("env_vars", app_id=app_id, action="set", name="GREETING", value="bonjour")
    preflight = await alice.ok("preflight_check", app_id=app_id, required_env=["GREETING"])
    assert preflight["verdict"] in ("pass", "warn"), preflight

    first = await deploy(alice, app_id, "rolling")
    assert first["state"] == "live", first
    body = (await fetch(world, "hello")).json()
    assert body["greeting"] == "bonjour"
    url = await alice.ok("get_app_url", app_id=app_id)
    assert url["url"] == f"http://hello--acme.localhost:{world.services.ingress.port}/"  # type: ignore[union-attr]

    for strategy in ("recreate", "blue_green"):
        assert (await deploy(alice, app_id, strategy))["state"] == "live", strategy
        assert (await fetch(world, "hello")).status_code == 200

    # a bad canary: the new release answers 500 to everything but its health check
    await alice.ok("env_vars", app_id=app_id, action="set", name="FAIL_ALL", value="1")
    stop = asyncio.Event()
    seen: list[tuple[int, str]] = []

    async def probe() -> None:
        async with httpx.AsyncClient(timeout=5) as http:
            for _ in range(2000):
                if stop.is_set():
                    return
                r = await http.get(
                    f"http://127.0.0.1:{world.services.ingress.port}/",  # type: ignore[union-attr]
                    headers={"host": "hello--acme.localhost"},
                )
                seen.append((r.status_code, r.text))
                await asyncio.sleep(0.01)

    prober = asyncio.create_task(probe())
    result = await alice.tool("deploy_app", app_id=app_id, strategy="canary", wait_seconds=60)
    stop.set()
    await prober
    assert result["isError"] is True
    canary = result["structuredContent"]
    assert canary["state"] == "rolled_back", canary
    failures_on_old = [
        s for s, text in seen if s != 200 and "failed on purpose" not in text and "FAIL" not in text
    ]
    assert failures_on_old == [], failures_on_old[:5]
    assert len(seen) > 20
    assert (await fetch(world, "hello")).status_code == 200  # the old release kept serving

    await alice.ok("env_vars", app_id=app_id, action="unset", name="FAIL_ALL")
    listed = await alice.ok("list_deployments", app_id=app_id)
    states = [d["state"] for d in listed["deployments"]]
    assert states[0] == "rolled_back"
    assert "live" in states

    rolled = await alice.ok("rollback_deploy", app_id=app_id)
    assert rolled["state"] == "live"
    assert (await fetch(world, "hello")).status_code == 200

    restarted = await alice.ok("restart_app", app_id=app_id)
    assert restarted["state"] == "live"
    assert (await fetch(world, "hello")).status_code == 200

    logs = await alice.ok("tail_deploy_logs", app_id=app_id, kind="runtime", lines=50)
    assert logs["lines"], logs
    build = await alice.ok("tail_deploy_logs", app_id=app_id, number=1, kind="build")
    assert isinstance(build["lines"], list)

    renamed = await alice.ok("manage_app", app_id=app_id, action="update", name="hello2")
    assert renamed["url"].startswith("http://hello2--acme.localhost:")
    assert (await fetch(world, "hello2")).status_code == 200  # the route moved with the name
    assert (await fetch(world, "hello")).status_code == 404


async def test_a_deploy_runs_as_a_task_with_progress(deploy_world: World) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    spec = {
        "source_path": str(world.source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz"},
    }
    app_id = (await alice.ok("register_app", name="tasked", spec=spec))["app_id"]
    created = await alice.rpc(
        "tools/call",
        {
            "name": "deploy_app",
            "arguments": {"app_id": app_id, "task": {"ttl": 60000}},
            "_meta": {"progressToken": "p"},
        },
    )
    task = created["result"]["task"]
    assert task["status"] == "working"
    async with asyncio.timeout(60):
        result = await alice.rpc("tasks/result", {"taskId": task["taskId"]})
    assert result["result"]["structuredContent"]["state"] == "live"
    got = await alice.rpc("tasks/get", {"taskId": task["taskId"]})
    assert got["result"]["status"] == "completed"
    assert (await fetch(world, "tasked")).json()["app"] == "hello"
