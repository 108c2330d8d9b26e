"""manage_ci through the HTTP app as an agent uses it: configure, a signed push tested in the
app's build sandbox and deployed when green, a red run blocking deploys, trigger, runs, logs;
every result, errors included, valid against the tool's outputSchema."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jsonschema import Draft202012Validator

from tests.platform.repos.gitrepo import BareRepo, bare_repo
from tests.platform.repos.payloads import push_payload, sign
from tests.tools.conftest import Caller, World

APP = (
    "import http.server, os\n"
    "port = int(os.environ['PORT'])\n"
    "handler = http.server.SimpleHTTPRequestHandler\n"
    "http.server.ThreadingHTTPServer(('127.0.0.1', port), handler).serve_forever()\n"
)
"""An app that serves (its deploy goes live; one that exits kept a green run's deploy
crash-looping ~16 s until it gave up)."""


def _repo(world: World) -> BareRepo:
    made = bare_repo(world.source.parent, "hello.git")  # inside acme's source root
    made.commit({"app.py": APP, "status": "green\n"}, "first version")
    return made


async def _checked(caller: Caller, **arguments: Any) -> dict[str, Any]:
    """The manage_ci result, checked against the tool's outputSchema (errors included)."""
    listed = await caller.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == "manage_ci"]
    result = await caller.tool("manage_ci", **arguments)
    Draft202012Validator(tool["outputSchema"]).validate(result["structuredContent"])
    return result


async def _app_with_repo(alice: Caller, repo: BareRepo) -> tuple[int, str]:
    """A python app connected to ``repo``: its id and webhook secret."""
    spec = {"run_command": "python3 app.py"}
    app_id = int((await alice.ok("register_app", name="hello", spec=spec))["app_id"])
    done = await alice.ok("connect_repo", action="connect", app_id=app_id, url=str(repo.bare))
    return app_id, str(done["webhook_secret"])


async def _push(world: World, app_id: int, secret: str, sha: str) -> dict[str, Any]:
    body = push_payload(sha, "a change")
    r = await world.client.post(
        f"/hooks/git/{app_id}",
        content=body,
        headers={
            "x-github-event": "push",
            "content-type": "application/json",
            "x-hub-signature-256": sign(secret, body),
        },
    )
    assert r.status_code in (200, 202), r.text
    return dict(r.json())


async def _ended(caller: Caller, app_id: int, number: int) -> dict[str, Any]:
    for _ in range(600):  # at most 60 s
        runs = (await caller.ok("manage_ci", action="runs", app_id=app_id))["runs"]
        [run] = [r for r in runs if r["number"] == number]
        if run["state"] not in ("queued", "running") and (
            run["state"] != "passed" or run["deployment"] is not None or "refused" in str(run)
        ):
            return dict(run)
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {number} did not end")


async def test_a_push_is_tested_in_the_sandbox_and_a_green_commit_deploys_itself(
    world: World,
) -> None:
    repo = _repo(world)
    alice = await world.caller("alice")
    app_id, secret = await _app_with_repo(alice, repo)
    configured = await _checked(
        alice,
        action="configure",
        app_id=app_id,
        test_command="grep -qx green status && echo tests-ok",
        auto_deploy=True,
        require_green=True,
        timeout_seconds=120,
    )
    assert configured["structuredContent"]["config"]["require_green"] is True
    sha = repo.commit({"app.py": APP + "# v2\n"}, "v2")
    pushed = await _push(world, app_id, secret, sha)
    assert (pushed["status"], pushed["commit"]) == ("testing", sha)
    run = await _ended(alice, app_id, 1)
    assert (run["state"], run["commit"]) == ("passed", sha)
    logs = await _checked(alice, action="logs", app_id=app_id, number=1)
    assert "tests-ok" in logs["structuredContent"]["log"]
    assert run["deployment"] is not None
    assert run["status_message"] == f"the tests passed; deployed as deployment {run['deployment']}"


async def test_a_red_run_blocks_the_deploy_and_trigger_reports_it_as_an_error(
    world: World,
) -> None:
    repo = _repo(world)
    alice = await world.caller("alice")
    app_id, _ = await _app_with_repo(alice, repo)
    await alice.ok(
        "manage_ci",
        action="configure",
        app_id=app_id,
        test_command="echo failing-test >&2; exit 7",
        require_green=True,
    )
    red = await _checked(alice, action="trigger", app_id=app_id, wait_seconds=60)
    assert red["isError"] is True
    content = red["structuredContent"]
    assert content["error"]["code"] == "failed_precondition"
    assert (content["run"]["state"], content["run"]["exit_code"]) == ("failed", 7)
    logs = await alice.ok("manage_ci", action="logs", app_id=app_id, number=1)
    assert "failing-test" in logs["log"]
    refused = await alice.tool("deploy_app", app_id=app_id)
    assert refused["isError"] is True
    assert "no passing CI run" in refused["structuredContent"]["error"]["message"]


async def test_roles_tenants_and_absurd_values_are_clear_errors(world: World) -> None:
    repo = _repo(world)
    alice, bob = await world.caller("alice"), await world.caller("bob")
    eve = await world.caller("eve", tenant="globex")
    app_id = (await alice.ok("register_app", name="hello"))["app_id"]
    configure = {"action": "configure", "app_id": app_id, "test_command": "true"}
    no_repo = await _checked(alice, **configure)
    assert no_repo["structuredContent"]["error"]["code"] == "failed_precondition"
    await alice.ok("connect_repo", action="connect", app_id=app_id, url=str(repo.bare))
    assert await eve.error("manage_ci", **configure) == "not_found"
    await alice.ok("manage_app", action="grant", app_id=app_id, user="bob", role="viewer")
    assert await bob.error("manage_ci", **configure) == "forbidden"
    for bad in (
        {"test_command": ""},
        {"test_command": "x" * 5000},
        {"test_command": "true\0"},
        {"timeout_seconds": 2**63},
        {"timeout_seconds": -1},
        {"strategy": "yolo"},
        {"branch": "other"},
    ):
        result = await _checked(alice, **{**configure, **bad})
        assert result["structuredContent"]["error"]["code"] == "invalid_argument", bad
    missing = await _checked(alice, action="get", app_id=app_id)
    assert missing["structuredContent"]["error"]["code"] == "not_found"
    await alice.ok("manage_ci", **configure)
    assert (await bob.ok("manage_ci", action="get", app_id=app_id))["last_run"] is None
    assert await bob.error("manage_ci", action="trigger", app_id=app_id) == "forbidden"
    no_run = await _checked(alice, action="logs", app_id=app_id, number=2**40)
    assert no_run["structuredContent"]["error"]["code"] == "not_found"
    reader = await world.caller("alice", scope="apps:read")
    assert (await reader.ok("manage_ci", action="get", app_id=app_id))["app_id"] == app_id
    r = await reader.client.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "manage_ci", "arguments": configure},
        },
        headers={
            "authorization": f"Bearer {reader.token}",
            "mcp-session-id": reader.session,
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        },
    )
    assert r.status_code == 403  # step-up: configure needs apps:write
    assert r.json()["error"]["data"] == {"scope": "apps:write"}


async def test_a_replayed_webhook_delivery_is_answered_200_and_starts_no_second_run(
    world: World,
) -> None:
    repo = _repo(world)
    alice = await world.caller("alice")
    app_id, secret = await _app_with_repo(alice, repo)
    await alice.ok("manage_ci", action="configure", app_id=app_id, test_command="true")
    sha = repo.commit({"app.py": APP + "# v2\n"}, "v2")
    body = push_payload(sha, "a change")
    headers = {
        "x-github-event": "push",
        "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "content-type": "application/json",
        "x-hub-signature-256": sign(secret, body),
    }
    first = await world.client.post(f"/hooks/git/{app_id}", content=body, headers=headers)
    assert (first.status_code, first.json()["status"]) == (202, "testing")
    for _ in range(600):  # at most 60 s
        [run] = (await alice.ok("manage_ci", action="runs", app_id=app_id))["runs"]
        if run["state"] not in ("queued", "running"):
            break
        await asyncio.sleep(0.1)
    assert run["state"] == "passed"
    for delivery in (headers["x-github-delivery"], "another-id"):  # byte for byte, or renamed
        again = await world.client.post(
            f"/hooks/git/{app_id}", content=body, headers={**headers, "x-github-delivery": delivery}
        )
        assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    runs = (await alice.ok("manage_ci", action="runs", app_id=app_id))["runs"]
    assert [r["number"] for r in runs] == [1]


async def test_ci_logs_show_no_server_path(world: World) -> None:
    repo = _repo(world)
    alice = await world.caller("alice")
    app_id, _ = await _app_with_repo(alice, repo)
    await alice.ok(
        "manage_ci", action="configure", app_id=app_id, test_command="echo tests-ran; exit 3"
    )
    await _checked(alice, action="trigger", app_id=app_id, wait_seconds=60)
    logs = await _checked(alice, action="logs", app_id=app_id, number=1)
    text = json.dumps(logs)
    assert "tests-ran" in text
    data_dir = str(world.services.settings.data_dir)
    for server_path in (data_dir, str(world.source.parent.parent)):
        assert server_path not in text, [x for x in text.split("\\n") if server_path in x]
