"""connect_repo through the HTTP app as an agent uses it, and the push webhook
``POST /hooks/git/{app_id}`` next to it."""

from __future__ import annotations

import json

from appdeck.platform.repos.github import GitHub
from tests.platform.repos.gitrepo import BareRepo, bare_repo
from tests.platform.repos.openapi import REPOS, STATUS, FakeGitHub, documented
from tests.platform.repos.payloads import push_payload, sign
from tests.tools.conftest import World

TOKEN = "ghp_neverShownAnywhere0123456789"


def _repo(world: World) -> BareRepo:
    made = bare_repo(world.source.parent, "hello.git")  # inside acme's source root
    made.commit({"app.py": "print('v1')\n"}, "first version")
    return made


async def test_connect_get_branches_and_disconnect(world: World) -> None:
    repo = _repo(world)
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="hello"))["app_id"]
    done = await alice.ok(
        "connect_repo", action="connect", app_id=app_id, url=str(repo.bare), auto_deploy=True
    )
    assert done["repo"]["branch"] == "main"
    assert done["repo"]["auto_deploy"] is True
    assert done["webhook_path"] == f"/hooks/git/{app_id}"
    assert len(done["webhook_secret"]) >= 40
    got = await alice.ok("connect_repo", action="get", app_id=app_id)
    assert done["webhook_secret"] not in json.dumps(got)
    assert got["repo"]["url"] == str(repo.bare)
    branches = await alice.ok("connect_repo", action="branches", app_id=app_id)
    assert [b["name"] for b in branches["branches"]] == ["main"]
    assert branches["branches"][0]["commit"] == done["head"]
    gone = await alice.ok("connect_repo", action="disconnect", app_id=app_id)
    assert gone["disconnected"] is True
    assert await alice.error("connect_repo", action="get", app_id=app_id) == "not_found"


async def test_bad_urls_roles_and_tenants_are_clear_errors(world: World) -> None:
    repo = _repo(world)
    alice, bob = await world.caller("alice"), await world.caller("bob")
    eve = await world.caller("eve", tenant="globex")
    app_id = (await alice.ok("register_app", name="hello"))["app_id"]
    for url in ("ext::sh -c id", "/etc", "https://h/r.git\n", "x" * 3000):
        assert (
            await alice.error("connect_repo", action="connect", app_id=app_id, url=url)
            == "invalid_argument"
        )
    connect = {"action": "connect", "app_id": app_id, "url": str(repo.bare)}
    assert await eve.error("connect_repo", **connect) == "not_found"
    await alice.ok("manage_app", action="grant", app_id=app_id, user="bob", role="viewer")
    assert await bob.error("connect_repo", **connect) == "forbidden"
    internal = {**connect, "url": "https://127.0.0.1:9/o/r.git", "token": TOKEN}
    result = await alice.tool("connect_repo", **internal)  # not a public address: git never runs
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_argument"
    assert TOKEN not in json.dumps(result)
    with_creds = {**connect, "url": f"https://u:{TOKEN}@example.com/o/r.git"}
    result = await alice.tool("connect_repo", **with_creds)
    assert result["structuredContent"]["error"]["code"] == "invalid_argument"
    assert TOKEN not in json.dumps(result)


async def test_the_webhook_answers_401_alike_unless_signed_and_records_the_push(
    world: World,
) -> None:
    repo = _repo(world)
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="hello"))["app_id"]
    done = await alice.ok("connect_repo", action="connect", app_id=app_id, url=str(repo.bare))
    secret = done["webhook_secret"]
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    body = push_payload(sha, "v2")
    headers = {"x-github-event": "push", "content-type": "application/json"}
    refused = []
    for path, signature in (
        (f"/hooks/git/{app_id}", sign("wrong", body)),
        (f"/hooks/git/{app_id}", ""),
        (f"/hooks/git/{app_id + 999}", sign(secret, body)),
        ("/hooks/git/abc", sign(secret, body)),
    ):
        r = await world.client.post(
            path, content=body, headers={**headers, "x-hub-signature-256": signature}
        )
        refused.append((r.status_code, r.text))
    assert len(set(refused)) == 1
    assert refused[0][0] == 401
    big = await world.client.post(f"/hooks/git/{app_id}", content=b"x" * (2 << 20))
    assert big.status_code == 413
    ok = await world.client.post(
        f"/hooks/git/{app_id}",
        content=body,
        headers={**headers, "x-hub-signature-256": sign(secret, body)},
    )
    assert ok.status_code == 200
    assert ok.json() == {"status": "recorded", "commit": sha}
    got = await alice.ok("connect_repo", action="get", app_id=app_id)
    assert got["repo"]["last_commit"] == sha


async def test_polling_is_set_at_connect_and_changed_by_its_action(world: World) -> None:
    repo = _repo(world)
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="hello"))["app_id"]
    connect = {"action": "connect", "app_id": app_id, "url": str(repo.bare)}
    assert await alice.error("connect_repo", **connect, poll_seconds=5) == "invalid_argument"
    done = await alice.ok("connect_repo", **connect, poll_seconds=600)
    assert done["repo"]["poll_seconds"] == 600
    changed = await alice.ok("connect_repo", action="polling", app_id=app_id)  # off
    assert changed["repo"]["poll_seconds"] is None
    again = await alice.ok("connect_repo", action="polling", app_id=app_id, poll_seconds=3600)
    assert again["repo"]["poll_seconds"] == 3600
    big = {"action": "polling", "app_id": app_id, "poll_seconds": 2**63}
    assert await alice.error("connect_repo", **big) == "invalid_argument"


async def test_github_repos_needs_a_github_connection_with_a_token(world: World) -> None:
    repo = _repo(world)
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="hello"))["app_id"]
    await alice.ok("connect_repo", action="connect", app_id=app_id, url=str(repo.bare))
    listed = {"action": "github_repos", "app_id": app_id}
    assert await alice.error("connect_repo", **listed) == "failed_precondition"
    repos = world.services.platform.repos
    fake = FakeGitHub([STATUS, REPOS], documented)
    repos.sources.github = GitHub(transport=fake.transport)
    await repos._store.put(
        app_id=app_id,
        url="https://github.com/octocat/Hello-World.git",
        token=repos._sealer.seal(TOKEN),
        branch="main",
        webhook_secret=repos._sealer.seal("s"),
        auto_deploy=False,
        connected_by="alice",
    )  # as connect would store it (git cannot reach github.com from a test)
    found = await alice.ok("connect_repo", **listed)
    assert [r["full_name"] for r in found["repos"]] == ["octocat/repo-1", "octocat/repo-2"]
    assert TOKEN not in json.dumps(found)
