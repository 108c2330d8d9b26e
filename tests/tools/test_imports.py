"""import_and_deploy through the HTTP app: a local repository of the hello fixture app becomes
a live app answering through the ingress; a retry changes nothing; a new commit deploys;
an app of that name on another repository is a conflict; a repository with nothing to run
is a clear error. Results, errors included, are valid against the outputSchema."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from tests.platform.repos.gitrepo import BareRepo, bare_repo

from .conftest import HELLO, Caller, World, fetch


def _hello_repo(world: World, name: str = "shop.git") -> BareRepo:
    made = bare_repo(world.source.parent, name)  # inside acme's source root
    made.commit({"app.py": (HELLO / "app.py").read_text()}, "the hello app")
    return made


async def _imported(caller: Caller, **arguments: Any) -> dict[str, Any]:
    listed = await caller.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == "import_and_deploy"]
    result = await caller.tool("import_and_deploy", **arguments)
    Draft202012Validator(tool["outputSchema"]).validate(result["structuredContent"])
    return result


async def test_a_repository_becomes_a_live_app_and_a_retry_changes_nothing(
    deploy_world: World,
) -> None:
    world = deploy_world
    repo = _hello_repo(world)
    alice = await world.caller("alice")
    first = await _imported(alice, url=str(repo.bare), wait_seconds=60)
    assert not first.get("isError"), first
    done = first["structuredContent"]
    assert done["name"] == "shop"
    assert done["detected"]["runtime"] == "python"
    assert done["detected"]["run_command"] == "python3 app.py"
    assert done["webhook_secret"]
    assert done["deployment"]["state"] == "live"
    assert done["deployment"]["source"]["commit"] == done["commit"]
    assert [s["step"] for s in done["steps"]] == [
        "app",
        "repository",
        "checkout",
        "spec",
        "preflight",
        "deploy",
    ]
    answer = await fetch(world, "shop")
    assert (answer.status_code, answer.json()["app"]) == (200, "hello")

    again = (await _imported(alice, url=str(repo.bare), wait_seconds=60))["structuredContent"]
    assert (again["app_id"], again["already_live"], again["webhook_secret"]) == (
        done["app_id"],
        True,
        None,
    )
    assert again["deployment"]["number"] == done["deployment"]["number"]

    sha = repo.commit({"README": "v2\n"}, "v2")
    newer = (await _imported(alice, url=str(repo.bare), wait_seconds=60))["structuredContent"]
    assert (newer["commit"], newer["already_live"]) == (sha, False)
    assert newer["deployment"]["number"] == done["deployment"]["number"] + 1
    assert newer["deployment"]["state"] == "live"


async def test_conflicts_and_repositories_with_nothing_to_run_are_clear_errors(
    deploy_world: World,
) -> None:
    world = deploy_world
    alice = await world.caller("alice")
    empty = bare_repo(world.source.parent, "docs.git")
    empty.commit({"notes.txt": "nothing to run\n"}, "notes")
    result = await _imported(alice, url=str(empty.bare))
    assert result["structuredContent"]["error"]["code"] == "failed_precondition"
    assert "could not tell how to run" in result["structuredContent"]["error"]["message"]

    hostile = bare_repo(world.source.parent, "evil.git")
    hostile.commit({"package.json": "[" * 100_000}, "deep")
    refused = await _imported(alice, url=str(hostile.bare))
    assert refused["structuredContent"]["error"]["code"] == "invalid_argument"

    other = _hello_repo(world, "other.git")
    clash = await _imported(alice, url=str(other.bare), name="docs")  # docs is on docs.git
    assert clash["structuredContent"]["error"]["code"] == "conflict"
    for bad in ({"url": "ext::sh -c id"}, {"url": str(other.bare), "name": "Bad Name!"}):
        out = await _imported(alice, **bad)
        assert out["structuredContent"]["error"]["code"] == "invalid_argument", bad
