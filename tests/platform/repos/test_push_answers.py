"""Pinned before the runtime seam refactor (docs/runtime-seam.md, step 0): a push's webhook
answer, whole (status, commit, reason), for each way it goes: ``deploying``, ``recorded``,
``testing`` (a CI run) and ``ignored`` (for each reason). test_push_deploy.py and
ci/test_service.py check the statuses and what follows them; this module pins the answers'
words, which the constructor ports (step 9) must not change."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.platform.repos.service import PushOutcome
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
    made.commit({"app.py": "print('v1')\n", "status": "green\n"}, "first version")
    return made


async def _connected(on: OnFakes, repo: BareRepo, *, auto_deploy: bool = True) -> tuple[int, str]:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    done = await on.platform.repos.connect(
        on.alice, app_id, str(repo.bare), auto_deploy=auto_deploy
    )
    return app_id, done.webhook_secret


async def _push(
    on: OnFakes, app_id: int, secret: str, body: bytes, event: str | None = "push"
) -> PushOutcome:
    return await on.platform.repos.push(app_id, body, sign(secret, body), event)


async def test_deploying(on: OnFakes, repo: BareRepo) -> None:
    app_id, secret = await _connected(on, repo)
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    assert await _push(on, app_id, secret, push_payload(sha, "v2")) == PushOutcome("deploying", sha)
    await on.platform.repos.settle()


async def test_recorded(on: OnFakes, repo: BareRepo) -> None:
    app_id, secret = await _connected(on, repo, auto_deploy=False)
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    assert await _push(on, app_id, secret, push_payload(sha, "v2")) == PushOutcome("recorded", sha)


async def test_testing(on: OnFakes, repo: BareRepo) -> None:
    app_id, secret = await _connected(on, repo)
    await on.platform.ci.configure(
        on.alice, app_id, test_command="grep -qx green status", auto_deploy=True
    )
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    outcome = await _push(on, app_id, secret, push_payload(sha, "v2"))
    await on.platform.ci.settle()
    await on.platform.repos.settle()
    assert outcome == PushOutcome("testing", sha, "CI run #1")


async def test_ignored_with_its_reason(on: OnFakes, repo: BareRepo) -> None:
    app_id, secret = await _connected(on, repo)
    star = b'{"action": "created"}'
    assert await _push(on, app_id, secret, star, "star") == PushOutcome(
        "ignored", None, "event 'star' is not a push"
    )
    assert await _push(on, app_id, secret, b'{"zen": 1}', "push") == PushOutcome(
        "ignored", None, "not a push payload"
    )
    dev = repo.commit({"d": "d"}, "dev", branch="dev")
    other = push_payload(dev, "dev", branch="dev")
    assert await _push(on, app_id, secret, other) == PushOutcome(
        "ignored", None, "not the connected branch main"
    )
    assert await _push(on, app_id, secret, push_payload("0" * 40, "")) == PushOutcome(
        "ignored", None, "the branch was deleted"
    )
    older = repo.commit({"app.py": "print('v2')\n"}, "v2")
    head = repo.commit({"app.py": "print('v3')\n"}, "v3")
    assert await _push(on, app_id, secret, push_payload(older, "v2")) == PushOutcome(
        "ignored",
        older,
        f"not the branch's current head ({head[:12]}): an older or out-of-order push is not "
        "deployed",
    )
    assert await _push(on, app_id, secret, push_payload(older, "v2")) == PushOutcome(
        "duplicate", None, "this delivery was received before: nothing done"
    )
    assert await on.platform.deploys.store.for_app(app_id, offset=0, limit=10) == []
