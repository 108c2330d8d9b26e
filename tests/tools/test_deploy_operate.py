"""Operating an app through the tools (issue 20, items 6 and 10), with real app processes and
the real ingress: deploy_app with a commit, restart_app's stop / start / scale, deploy_app's
cancel. The fixture app is tests/fixtures/apps/hello."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.platform.repos.gitrepo import bare_repo

from .conftest import HELLO, Caller, World, fetch

SPEC = {"run_command": "python3 app.py", "health_check": {"path": "/healthz", "timeout_s": 5}}


async def _running(world: World, app_id: int, number: int, want: int | None = None) -> int:
    """The release's instances with a process now; with ``want``, looked at again (bounded:
    10 s) while they differ, as a crashed instance is being restarted by its supervisor."""
    runtime = world.services.platform.deploys.runtime
    for _ in range(100):
        found = len(await runtime.running(f"{app_id}-{number}"))
        if want is None or found == want:
            break
        await asyncio.sleep(0.1)
    return found


async def _hello(alice: Caller, world: World, name: str, **spec: Any) -> int:
    full = {**SPEC, "source_path": str(world.source), **spec}
    return int((await alice.ok("register_app", name=name, spec=full))["app_id"])


async def test_deploy_app_deploys_a_named_commit_by_full_sha_or_prefix(
    deploy_world: World,
) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    repo = bare_repo(world.source.parent, "hello.git")  # inside acme's source root
    text = (HELLO / "app.py").read_text()
    v1 = repo.commit({"app.py": text}, "v1")
    v2 = repo.commit({"app.py": text.replace('"APP_VERSION_LABEL", "v1"', '"x", "v2"')}, "v2")
    app_id = (await alice.ok("register_app", name="gitty", spec=SPEC))["app_id"]
    await alice.ok("connect_repo", action="connect", app_id=app_id, url=str(repo.bare))

    head = await alice.ok("deploy_app", app_id=app_id, wait_seconds=60)
    assert (head["state"], head["source"]["commit"]) == ("live", v2)
    assert (await fetch(world, "gitty")).json()["version"] == "v2"
    again = await alice.ok("deploy_app", app_id=app_id, commit=v1[:10], wait_seconds=60)
    assert (again["state"], again["source"]["commit"]) == ("live", v1)  # resolved in full
    assert (await fetch(world, "gitty")).json()["version"] == "v1"
    full = await alice.ok("deploy_app", app_id=app_id, commit=v2.upper(), wait_seconds=60)
    assert full["source"]["commit"] == v2

    unknown = await alice.tool("deploy_app", app_id=app_id, commit="0123456789abc")
    assert unknown["structuredContent"]["error"]["code"] == "failed_precondition"
    assert "not on the connected branch" in unknown["structuredContent"]["error"]["message"]
    assert await alice.error("deploy_app", app_id=app_id, commit="v1; rm") == "invalid_argument"
    assert await alice.error("deploy_app", app_id=app_id, commit="abc") == "invalid_argument"
    plain = await _hello(alice, world, "plain")
    refused = await alice.tool("deploy_app", app_id=plain, commit=v1)
    error = refused["structuredContent"]["error"]
    assert error["code"] == "failed_precondition"
    assert "connect_repo" in error["hint"]


async def test_stop_answers_503_stopped_keeps_the_data_and_start_brings_it_back(
    deploy_world: World,
) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    app_id = await _hello(alice, world, "hello", instances=2)
    assert (await alice.ok("deploy_app", app_id=app_id, wait_seconds=60))["state"] == "live"
    await alice.ok("env_vars", app_id=app_id, action="set", name="GREETING", value="salut")
    columns = [{"name": "title", "type": "text"}]
    await alice.ok("manage_table", app_id=app_id, action="create", table="notes", columns=columns)
    await alice.ok("records", app_id=app_id, action="insert", table="notes", rows=[{"title": "a"}])
    assert await _running(world, app_id, 1, 2) == 2

    stopped = await alice.ok("restart_app", app_id=app_id, action="stop")
    assert (stopped["app_stopped"], stopped["running_instances"]) == (True, 0)
    answer = await fetch(world, "hello")
    assert answer.status_code == 503
    assert "stopped" in answer.text
    assert await _running(world, app_id, 1) == 0  # the processes are gone
    got = await alice.ok("manage_app", app_id=app_id, action="get")
    assert got["stopped"] is True
    rows = await alice.ok("records", app_id=app_id, action="list", table="notes")
    assert [r["title"] for r in rows["rows"]] == ["a"]  # the data is kept
    for refused in (
        alice.tool("deploy_app", app_id=app_id),
        alice.tool("restart_app", app_id=app_id),
        alice.tool("rollback_deploy", app_id=app_id),
    ):
        error = (await refused)["structuredContent"]["error"]
        assert error["code"] == "failed_precondition"
        assert "action start" in error["hint"]

    started = await alice.ok("restart_app", app_id=app_id, action="start")
    assert (started["app_stopped"], started["running_instances"]) == (False, 2)
    assert (await fetch(world, "hello")).status_code == 200
    assert (await alice.ok("manage_app", app_id=app_id, action="get"))["stopped"] is False
    listed = await alice.ok("list_deployments", app_id=app_id)
    assert [d["state"] for d in listed["deployments"]] == ["live"]  # no new release


async def test_scale_changes_the_running_instances_without_a_new_release(
    deploy_world: World,
) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    app_id = await _hello(alice, world, "scaled", instances=2)
    assert (await alice.ok("deploy_app", app_id=app_id, wait_seconds=60))["state"] == "live"
    assert world.services.router is not None
    for count in (3, 1):
        done = await alice.ok("restart_app", app_id=app_id, action="scale", instances=count)
        assert (done["number"], done["running_instances"]) == (1, count)
        assert await _running(world, app_id, 1, count) == count
        backends = world.services.router.table.get("scaled--acme")
        assert backends is not None
        assert len(backends[0].upstreams) == count
        assert (await fetch(world, "scaled")).status_code == 200
    listed = await alice.ok("list_deployments", app_id=app_id)
    assert len(listed["deployments"]) == 1
    spec = (await alice.ok("manage_app", app_id=app_id, action="get"))["spec"]
    assert spec["instances"] == 1  # the next deploy keeps the count
    restarted = await alice.ok("restart_app", app_id=app_id)  # a restart keeps it too
    assert restarted["running_instances"] == 1
    assert await _running(world, app_id, 1, 1) == 1
    too_many = await alice.error("restart_app", app_id=app_id, action="scale", instances=11)
    assert too_many == "invalid_argument"


async def test_cancel_ends_a_deploy_in_progress_cancelled_and_the_live_release_serves(
    deploy_world: World, tmp_path: Path
) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    app_id = await _hello(alice, world, "cancelme")
    assert (await alice.ok("deploy_app", app_id=app_id, wait_seconds=60))["state"] == "live"
    await alice.ok(
        "set_app_spec", app_id=app_id, spec={"build_command": "sleep 120"}
    )  # the next deploy stays building
    slow = await alice.ok("deploy_app", app_id=app_id, wait_seconds=0)
    assert slow["done"] is False
    for _ in range(200):  # bounded: until the build runs
        if (await alice.ok("list_deployments", app_id=app_id))["deployments"][0]["state"] in (
            "building",
        ):
            break
        await asyncio.sleep(0.05)
    wrong = await alice.error("deploy_app", app_id=app_id, action="cancel", number=1)
    assert wrong == "failed_precondition"  # #1 is live, not in progress
    cancelled = await alice.ok("deploy_app", app_id=app_id, action="cancel")
    assert (cancelled["number"], cancelled["state"]) == (2, "cancelled")
    listed = await alice.ok("list_deployments", app_id=app_id)
    assert [d["state"] for d in listed["deployments"]] == ["cancelled", "live"]
    assert (await fetch(world, "cancelme")).status_code == 200
    assert await _running(world, app_id, 2) == 0
    nothing = await alice.error("deploy_app", app_id=app_id, action="cancel")
    assert nothing == "failed_precondition"
