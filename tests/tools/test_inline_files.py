"""Inline files through the HTTP app and a real runtime: import_and_deploy from files makes a
live app whose source is a commit of its hosted repository (by the caller); deploy_app with
files commits on top (files not listed are kept, null deletes) and deploys; rollback_deploy
goes back to the previous commit; absurd files are refused naming the rule or the limit,
and commit nothing."""

from __future__ import annotations

import base64
from typing import Any

from jsonschema import Draft202012Validator

from appdeck.runtime.disks import loop_available, mounts

from .conftest import HELLO, Caller, World, fetch

APP = (HELLO / "app.py").read_text()


async def _checked(caller: Caller, tool_name: str, **arguments: Any) -> dict[str, Any]:
    listed = await caller.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == tool_name]
    result = await caller.tool(tool_name, **arguments)
    assert not result.get("isError"), result
    Draft202012Validator(tool["outputSchema"]).validate(result["structuredContent"])
    return dict(result["structuredContent"])


async def test_inline_files_are_committed_deployed_and_rolled_back(deploy_world: World) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    files = [{"path": "app.py", "content": APP}, {"path": "notes/a.txt", "content": "a"}]
    first = await _checked(alice, "import_and_deploy", name="shop", files=files, wait_seconds=60)
    assert first["deployment"]["state"] == "live"
    assert first["push_url"].endswith("/git/acme/shop.git")
    source = first["deployment"]["source"]
    assert (source["kind"], source["commit"]) == ("git", first["commit"])
    answer = await fetch(world, "shop")
    assert (answer.status_code, answer.json()["version"]) == (200, "v1")
    hosting = world.services.platform.hosting  # type: ignore[union-attr]
    assert hosting is not None
    repo = hosting.hosted.path(first["app_id"])
    if loop_available() is None:  # loop disks ("auto"): the repository is on the app's disk
        assert repo.parent == world.services.settings.data_dir / "disks" / str(first["app_id"])
        assert str(repo.parent) in mounts()
        assert (repo / "HEAD").is_file()

    v2 = base64.b64encode(APP.replace('"v1")', '"v2")').encode()).decode()
    second = await _checked(
        alice,
        "deploy_app",
        app_id=first["app_id"],
        files=[
            {"path": "app.py", "content": v2, "encoding": "base64"},
            {"path": "notes/a.txt", "content": None},
        ],
        wait_seconds=60,
    )
    assert second["state"] == "live"
    assert second["source"]["commit"] != first["commit"]
    assert (await fetch(world, "shop")).json()["version"] == "v2"
    repo = await alice.ok("connect_repo", action="get", app_id=first["app_id"])
    assert repo["repo"]["url"] == "hosted"
    assert repo["repo"]["last_commit"] == second["source"]["commit"]

    back = await alice.ok("rollback_deploy", app_id=first["app_id"])
    assert back["source"]["commit"] == first["commit"]
    assert (await fetch(world, "shop")).json()["version"] == "v1"

    again = await _checked(
        alice, "deploy_app", app_id=first["app_id"], files=[{"path": "z.txt", "content": "z"}],
        wait_seconds=60,
    )  # fmt: skip
    assert again["state"] == "live"  # v2's app.py kept: only z.txt was listed
    assert (await fetch(world, "shop")).json()["version"] == "v2"


async def test_absurd_inline_files_are_refused_and_commit_nothing(deploy_world: World) -> None:
    alice = await deploy_world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    refused = [
        ([{"path": "../etc/passwd", "content": "x"}], "not a normal relative path"),
        ([{"path": "/abs", "content": "x"}], "absolute"),
        ([{"path": "a\x00b", "content": "x"}], "control character"),
        ([{"path": "a\nb", "content": "x"}], "control character"),
        ([{"path": ".git/config", "content": "x"}], ".git"),
        ([{"path": "x/.GIT/hooks/pre", "content": "x"}], ".git"),
        ([{"path": "a//b", "content": "x"}], "not a normal relative path"),
        ([{"path": "a\\b", "content": "x"}], "backslash"),
        ([{"path": "a", "content": "x"}, {"path": "a", "content": "y"}], "twice"),
        ([{"path": "a", "content": "%%%", "encoding": "base64"}], "base64"),
        ([{"path": "a", "content": "x" * ((3 << 20) + 1)}], "limit per call"),
        ([{"path": f"f{i}", "content": ""} for i in range(1001)], "at most 1000"),
    ]
    for files, said in refused:
        result = await alice.tool("deploy_app", app_id=app_id, files=files)
        assert result.get("isError") is True, files[:1]
        error = result["structuredContent"]["error"]
        assert error["code"] == "invalid_argument", error
        assert said in error["message"], (said, error["message"])
    listed = await alice.ok("list_deployments", app_id=app_id)
    assert listed["deployments"] == []
    assert (await alice.error("connect_repo", action="get", app_id=app_id)) == "not_found"
