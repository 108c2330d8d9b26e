"""Polling: a connection with poll_seconds is checked when due; a new head goes through the
same path as a webhook push (trigger "poll"); failures back off; a disconnected repository or a
deleted app is not polled. poll_once() is driven with a test clock: nothing sleeps."""

from __future__ import annotations

import logging
import shutil

import pytest

from appdeck.common.errors import InvalidArgument, NotFound, PermissionDenied
from appdeck.platform.deploy import states
from appdeck.platform.repos.poller import Poller
from appdeck.platform.repos.service import RepoService
from tests.platform.on_fakes import OnFakes
from tests.platform.repos.gitrepo import BareRepo, bare_repo

SPEC = {"run_command": "python3 app.py"}


class Clock:
    def __init__(self) -> None:
        self.now = 2_000_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def repo(on: OnFakes) -> BareRepo:
    made = bare_repo(on.source.parent)
    made.commit({"app.py": "print('v1')\n"}, "first version")
    return made


@pytest.fixture
def clock(on: OnFakes) -> Clock:
    made = Clock()
    repos: RepoService = on.platform.repos
    repos.poller = Poller(repos, repos._store, clock=made)
    return made


async def _app(on: OnFakes) -> int:
    return (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id


async def test_a_new_commit_found_by_polling_is_deployed_like_a_push(
    on: OnFakes, repo: BareRepo, clock: Clock
) -> None:
    app_id = await _app(on)
    repos = on.platform.repos
    done = await repos.connect(on.alice, app_id, str(repo.bare), auto_deploy=True, poll_seconds=60)
    assert done.repo.poll_seconds == 60
    clock.now = done.repo.updated_at + 30
    assert await repos.poller.poll_once() == {}  # not due yet
    clock.now += 31
    assert await repos.poller.poll_once() == {app_id: "unchanged"}  # the head at connect
    sha = repo.commit({"app.py": "print('v2')\n"}, "Polled v2\n\nbody")
    assert await repos.poller.poll_once() == {}  # polled just now
    clock.now += 60
    assert await repos.poller.poll_once() == {app_id: "deploying"}
    await repos.settle()
    [record] = await on.platform.deploys.store.for_app(app_id, offset=0, limit=10)
    assert record.state == states.LIVE
    assert (record.source["commit"], record.source["message"]) == (sha, "Polled v2\n\nbody")
    view = await repos.get(on.alice, app_id)
    assert (view.last_commit, view.last_message) == (sha, "Polled v2\n\nbody")
    clock.now += 60
    assert await repos.poller.poll_once() == {app_id: "unchanged"}


async def test_polling_turned_on_later_starts_from_the_head_and_hands_commits_to_ci(
    on: OnFakes, repo: BareRepo, clock: Clock
) -> None:
    app_id = await _app(on)
    repos = on.platform.repos
    await repos.connect(on.alice, app_id, str(repo.bare))
    await on.platform.ci.configure(on.alice, app_id, test_command="true")
    assert (await repos.get(on.alice, app_id)).poll_seconds is None
    assert await repos.poller.poll_once() == {}
    view = await repos.set_polling(on.alice, app_id, 300)
    assert view.poll_seconds == 300
    assert await repos.poller.poll_once() == {app_id: "baseline"}  # due at once
    assert await on.platform.ci.runs(on.alice, app_id, offset=0, limit=10) == []
    sha = repo.commit({"b.txt": "b"}, "second")
    clock.now += 300
    assert await repos.poller.poll_once() == {app_id: "testing"}  # the push policy: CI first
    await on.platform.ci.settle()
    runs = await on.platform.ci.runs(on.alice, app_id, offset=0, limit=10)
    assert [(r.commit, r.trigger, r.message) for r in runs] == [(sha, "poll", "second")]
    await repos.set_polling(on.alice, app_id, None)
    clock.now += 10**6
    assert await repos.poller.poll_once() == {}


async def test_a_failing_poll_is_logged_and_backs_off(
    on: OnFakes, repo: BareRepo, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "appdeck.repos")
    app_id = await _app(on)
    repos = on.platform.repos
    done = await repos.connect(on.alice, app_id, str(repo.bare), poll_seconds=60)
    shutil.rmtree(repo.bare)  # the repository is gone
    clock.now = done.repo.updated_at + 60
    assert await repos.poller.poll_once() == {app_id: "failed"}
    assert f"polling the repository of app {app_id} failed (1 in a row" in caplog.text
    clock.now += 60
    assert await repos.poller.poll_once() == {}  # backing off: 60 s more
    clock.now += 60
    assert await repos.poller.poll_once() == {app_id: "failed"}
    clock.now += 60 * 3
    assert await repos.poller.poll_once() == {}  # 2 in a row: 180 s more
    clock.now += 60
    assert await repos.poller.poll_once() == {app_id: "failed"}


async def test_a_disconnected_repository_or_a_deleted_app_is_not_polled(
    on: OnFakes, repo: BareRepo, clock: Clock
) -> None:
    first, second = await _app(on), (await on.platform.apps.register(on.alice, "two")).app.id
    repos = on.platform.repos
    for app_id in (first, second):
        await repos.connect(on.alice, app_id, str(repo.bare), poll_seconds=60)
    await repos.disconnect(on.alice, first)
    await on.platform.apps.delete(on.alice, second, confirmed=True)
    clock.now += 10**6
    assert await repos.poller.poll_once() == {}


@pytest.mark.parametrize("seconds", [0, 59, 86_401, -60, 2**63])
async def test_poll_seconds_out_of_range_are_refused(
    on: OnFakes, repo: BareRepo, seconds: int
) -> None:
    app_id = await _app(on)
    repos = on.platform.repos
    with pytest.raises(InvalidArgument, match="between 60 and 86400"):
        await repos.connect(on.alice, app_id, str(repo.bare), poll_seconds=seconds)
    await repos.connect(on.alice, app_id, str(repo.bare))
    with pytest.raises(InvalidArgument, match="between 60 and 86400"):
        await repos.set_polling(on.alice, app_id, seconds)


async def test_polling_needs_the_connect_role_and_a_connection(on: OnFakes, repo: BareRepo) -> None:
    app_id = await _app(on)
    repos = on.platform.repos
    with pytest.raises(NotFound, match="no repository"):
        await repos.set_polling(on.alice, app_id, 60)
    await repos.connect(on.alice, app_id, str(repo.bare))
    with pytest.raises(NotFound):
        await repos.set_polling(on.eve, app_id, 60)
    await on.platform.apps.grant(on.alice, app_id, "bob", "viewer")
    with pytest.raises(PermissionDenied):
        await repos.set_polling(on.bob, app_id, 60)


async def test_the_poller_loop_starts_and_stops(on: OnFakes) -> None:
    poller = on.platform.repos.poller
    poller.start(tick_s=0.01)
    await poller.stop()
    await poller.stop()  # twice: nothing to stop
    assert poller._task is None
