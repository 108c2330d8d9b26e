"""A signed push deploys the pushed commit; deployments record the commit and read a checkout
at it; a bad signature, another branch, a hostile tree are refused or ignored."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.platform.changes import Change
from appdeck.platform.deploy import states
from appdeck.platform.deploy.ports import Instance, Readiness, Release
from appdeck.platform.repos.git import Limits
from appdeck.platform.repos.service import WebhookRefused
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.platform.repos.gitrepo import BareRepo, bare_repo
from tests.platform.repos.payloads import push_payload, sign

SPEC = {"run_command": "python3 app.py"}


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


@pytest.fixture
def repo(on: OnFakes) -> BareRepo:
    made = bare_repo(on.source.parent)
    made.commit({"app.py": "print('v1')\n"}, "first version")
    return made


async def _connected(on: OnFakes, repo: BareRepo, *, auto_deploy: bool = True) -> tuple[int, str]:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    done = await on.platform.repos.connect(
        on.alice, app_id, str(repo.bare), auto_deploy=auto_deploy
    )
    return app_id, done.webhook_secret


async def test_a_signed_push_deploys_the_pushed_commit(on: OnFakes, repo: BareRepo) -> None:
    app_id, secret = await _connected(on, repo)
    sha = repo.commit({"app.py": "print('v2')\n"}, "Ship v2\n\nwith a body")
    body = push_payload(sha, "Ship v2\n\nwith a body")
    outcome = await on.platform.repos.push(app_id, body, sign(secret, body), "push")
    assert (outcome.status, outcome.commit) == ("deploying", sha)
    await on.platform.repos.settle()
    [record] = await on.platform.deploys.store.for_app(app_id, offset=0, limit=10)
    assert record.state == states.LIVE
    assert record.source["commit"] == sha
    assert record.source["kind"] == "git"
    assert record.source["message"] == "Ship v2\n\nwith a body"
    checkout = Path(record.source["path"], "app.py")
    assert checkout.read_text() == "print('v2')\n"  # noqa: ASYNC240 (a test's one small read)
    assert (await on.platform.repos.get(on.alice, app_id)).last_commit == sha


async def test_a_received_commit_is_told_to_the_feed_for_observers_only(
    on: OnFakes, repo: BareRepo
) -> None:
    seen: list[Change] = []

    async def observe(change: Change) -> None:
        seen.append(change)

    on.platform.feed.subscribe(observe)
    app_id, secret = await _connected(on, repo)
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    body = push_payload(sha, "v2")
    seen.clear()
    outcome = await on.platform.repos.push(app_id, body, sign(secret, body), "push")
    assert (outcome.status, outcome.commit) == ("deploying", sha)  # the push policy's answer
    assert seen[:2] == [
        Change("app.updated", on.alice.tenant, app_id),
        Change("commit.received", on.alice.tenant, app_id, commit=sha),
    ]
    await on.platform.repos.settle()
    other = push_payload(repo.commit({"c": "c"}, "c"), "c", branch="other")
    seen.clear()
    outcome = await on.platform.repos.push(app_id, other, sign(secret, other), "push")
    assert outcome.status == "ignored"
    assert [c for c in seen if c.kind == "commit.received"] == []  # not the connected branch


async def test_a_bad_or_missing_signature_is_refused_like_an_unknown_app(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, secret = await _connected(on, repo)
    body = push_payload(repo.commit({"b": "b"}, "b"), "b")
    good = sign(secret, body)
    flipped = good[:-1] + ("1" if good.endswith("0") else "0")  # always one digit off
    for signature in (None, "", sign("wrong", body), flipped, "sha1=abc"):
        with pytest.raises(WebhookRefused):
            await on.platform.repos.push(app_id, body, signature, "push")
    with pytest.raises(WebhookRefused):
        await on.platform.repos.push(app_id + 1000, body, sign(secret, body), "push")
    with pytest.raises(WebhookRefused):  # a tampered body
        await on.platform.repos.push(app_id, body + b" ", sign(secret, body), "push")
    assert await on.platform.deploys.store.for_app(app_id, offset=0, limit=10) == []


async def test_pings_other_branches_and_other_events_deploy_nothing(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, secret = await _connected(on, repo)
    repos = on.platform.repos
    ping = b'{"zen": "Keep it logically awesome.", "hook_id": 1}'
    assert (await repos.push(app_id, ping, sign(secret, ping), "ping")).status == "pong"
    other = push_payload(repo.commit({"d": "d"}, "dev", branch="dev"), "dev", branch="dev")
    assert (await repos.push(app_id, other, sign(secret, other), "push")).status == "ignored"
    star = b'{"action": "created"}'
    assert (await repos.push(app_id, star, sign(secret, star), "star")).status == "ignored"
    gone = push_payload("0" * 40, "")
    assert (await repos.push(app_id, gone, sign(secret, gone), "push")).status == "ignored"
    assert await on.platform.deploys.store.for_app(app_id, offset=0, limit=10) == []


async def test_without_auto_deploy_a_push_is_recorded_only(on: OnFakes, repo: BareRepo) -> None:
    app_id, secret = await _connected(on, repo, auto_deploy=False)
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    body = push_payload(sha, "v2")
    assert (await on.platform.repos.push(app_id, body, sign(secret, body), None)).status == (
        "recorded"
    )
    assert await on.platform.deploys.store.for_app(app_id, offset=0, limit=10) == []
    view = await on.platform.repos.get(on.alice, app_id)
    assert (view.last_commit, view.last_message) == (sha, "v2")


async def test_pushes_during_a_deploy_wait_for_it_and_only_the_newest_is_deployed(
    on: OnFakes, repo: BareRepo
) -> None:
    """A push while a deploy runs is not dropped: it is deployed once the app is free, and of
    two pushes made meanwhile only the newer (the branch's head) is."""
    app_id, secret = await _connected(on, repo)
    healthy = on.runtime.wait_ready
    entered, let_go = asyncio.Event(), asyncio.Event()

    async def held(release: Release, instance: Instance, within_s: float) -> Readiness:
        entered.set()
        await let_go.wait()
        return await healthy(release, instance, within_s)

    on.runtime.wait_ready = held  # type: ignore[method-assign]
    first = asyncio.ensure_future(on.platform.deployments.deploy(on.alice, app_id, wait_s=None))
    async with asyncio.timeout(30):
        await entered.wait()  # deployment 1 is starting
        outcomes = []
        for version in ("v2", "v3"):
            sha = repo.commit({"app.py": f"print('{version}')\n"}, version)
            body = push_payload(sha, version)
            outcomes.append(await on.platform.repos.push(app_id, body, sign(secret, body), "push"))
        assert [o.status for o in outcomes] == ["deploying", "deploying"]
        let_go.set()
        assert (await first).live
        await on.platform.repos.settle()
    records = await on.platform.deploys.store.for_app(app_id, offset=0, limit=10)
    assert [(r.number, r.state) for r in records] == [(2, states.LIVE), (1, states.SUPERSEDED)]
    assert records[0].source["commit"] == outcomes[1].commit  # v3; v2 was superseded


async def test_deploy_app_deploys_the_branch_head_or_a_named_commit(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, _ = await _connected(on, repo, auto_deploy=False)
    first = repo.commit({"app.py": "print('v2')\n"}, "v2")
    head = repo.commit({"app.py": "print('v3')\n"}, "v3")
    deployments = on.platform.deployments
    done = await deployments.deploy(on.alice, app_id, wait_s=None)
    assert done.live
    assert done.record.source["commit"] == head
    older = await deployments.deploy(on.alice, app_id, wait_s=None, commit=first)
    assert older.live
    assert older.record.source["message"] == "v2"
    with pytest.raises(FailedPrecondition, match="not on the connected branch"):
        await deployments.deploy(on.alice, app_id, wait_s=None, commit="a" * 40)
    with pytest.raises(InvalidArgument, match="hex sha, whole or its first 7"):
        await deployments.deploy(on.alice, app_id, wait_s=None, commit="abc")
    prefix = await deployments.deploy(on.alice, app_id, wait_s=None, commit=first[:8])
    assert prefix.record.source["commit"] == first  # a prefix, resolved in full


async def test_a_hostile_tree_is_refused_at_checkout(on: OnFakes, repo: BareRepo) -> None:
    app_id, _ = await _connected(on, repo, auto_deploy=False)
    os.symlink("/etc/passwd", repo.work / "passwd")
    repo.commit({}, "a link out")
    with pytest.raises(InvalidArgument, match="leads out of its tree"):
        await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)
    os.unlink(repo.work / "passwd")
    repo.commit({"big.bin": "x" * 5000}, "a big file")
    on.platform.repos._git.limits = Limits(max_bytes=1000)  # the files' bytes, counted
    with pytest.raises(InvalidArgument, match="has more than 20000 files or 1000 bytes"):
        await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)
    repo.commit({"huge.bin": "y" * 100_000}, "a huge file")
    on.platform.repos._git.limits = Limits(max_bytes=1000, max_files=5)  # the stream, cut
    with pytest.raises(InvalidArgument, match="larger than 1000 bytes"):
        await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)
    assert await on.platform.deploys.store.for_app(app_id, offset=0, limit=10) == []


async def test_a_deploy_without_a_repository_cannot_name_a_commit(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    with pytest.raises(FailedPrecondition, match="this app has none") as refused:
        await on.platform.deployments.deploy(on.alice, app_id, wait_s=None, commit="a" * 40)
    assert refused.value.hint == "connect_repo first"


async def test_disconnecting_drops_the_fetched_objects_and_checkouts(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, _ = await _connected(on, repo, auto_deploy=False)
    done = await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)
    checkout = Path(done.record.source["path"])
    assert checkout.is_dir()  # noqa: ASYNC240
    assert "path" not in done.public()["source"]  # the data dir is not the caller's
    await on.platform.repos.disconnect(on.alice, app_id)
    assert not checkout.exists()  # noqa: ASYNC240
