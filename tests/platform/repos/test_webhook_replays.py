"""Webhook replays and out-of-order pushes (issue 19, finding 8): a signed delivery sent again
byte for byte (with its ``X-GitHub-Delivery`` or another) does nothing the second time, and a
push whose head is not the branch's current head never puts an older commit back live."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.platform.deploy import states
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.platform.repos.gitrepo import BareRepo, bare_repo, git
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


async def _live_commits(on: OnFakes, app_id: int) -> list[str]:
    records = await on.platform.deploys.store.for_app(app_id, offset=0, limit=50)
    return [r.source["commit"] for r in records if r.state == states.LIVE]


async def test_a_replayed_delivery_does_nothing_the_second_time(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, secret = await _connected(on, repo)
    repos = on.platform.repos
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    body = push_payload(sha, "v2")
    first = await repos.push(app_id, body, sign(secret, body), "push", delivery="d-1")
    assert first.status == "deploying"
    await repos.settle()
    for delivery in ("d-1", "d-2", None):  # the same one, or its body under another id
        again = await repos.push(app_id, body, sign(secret, body), "push", delivery=delivery)
        assert again.status == "duplicate"
        assert "received before" in again.reason
    await repos.settle()
    deployed = await on.platform.deploys.store.for_app(app_id, offset=0, limit=10)
    assert len(deployed) == 1


async def test_an_out_of_order_push_of_an_older_head_does_not_move_the_deployed_commit(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, secret = await _connected(on, repo)
    repos = on.platform.repos
    older = repo.commit({"app.py": "print('v2')\n"}, "v2")
    newer = repo.commit({"app.py": "print('v3')\n"}, "v3")
    late = push_payload(older, "v2")  # v2's delivery arrives after v3's
    fresh = push_payload(newer, "v3", before=older)
    assert (await repos.push(app_id, fresh, sign(secret, fresh), "push", delivery="b")).status == (
        "deploying"
    )
    await repos.settle()
    assert await _live_commits(on, app_id) == [newer]
    outcome = await repos.push(app_id, late, sign(secret, late), "push", delivery="a")
    assert outcome.status == "ignored"
    assert "not the branch's current head" in outcome.reason
    await repos.settle()
    assert await _live_commits(on, app_id) == [newer]
    assert (await repos.get(on.alice, app_id)).last_commit == newer


async def test_a_push_that_really_moved_the_branch_back_is_followed(
    on: OnFakes, repo: BareRepo
) -> None:
    """A force push back to an older commit is the branch's head: it is deployed."""
    app_id, secret = await _connected(on, repo, auto_deploy=False)
    repos = on.platform.repos
    older = repo.commit({"app.py": "print('v2')\n"}, "v2")
    newer = repo.commit({"app.py": "print('v3')\n"}, "v3")
    body = push_payload(newer, "v3")
    assert (await repos.push(app_id, body, sign(secret, body), "push")).status == "recorded"
    git("push", "-q", "--force", "origin", f"{older}:main", cwd=repo.work)
    back = push_payload(older, "v2", before=newer)
    assert (await repos.push(app_id, back, sign(secret, back), "push")).status == "recorded"
    assert (await repos.get(on.alice, app_id)).last_commit == older
