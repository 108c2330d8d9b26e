"""CI on the platform: configuration rules, a signed push → a run → a deploy of that commit
when green, nothing when red, require_green gating every deploy, dense run numbers, restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from appdeck.common.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from appdeck.platform.ci.service import CIService
from appdeck.platform.deploy import states
from appdeck.storage import Storage
from appdeck.storage.ci import CIStore
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.platform.repos.gitrepo import BareRepo, bare_repo
from tests.platform.repos.payloads import push_payload, sign

SPEC = {"run_command": "python3 app.py", "env": {"GREETING": "hello"}}
GREEN = "grep -qx green status"
"""The fixture's test: passes while the file named status says green."""


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


@pytest.fixture
def repo(on: OnFakes) -> BareRepo:
    made = bare_repo(on.source.parent)
    made.first = made.commit({"app.py": "print('v1')\n", "status": "green\n"}, "first version")  # type: ignore[attr-defined]
    return made


async def _connected(on: OnFakes, repo: BareRepo, **ci: object) -> tuple[int, str]:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    done = await on.platform.repos.connect(on.alice, app_id, str(repo.bare))
    settings: dict[str, object] = {"test_command": GREEN, "auto_deploy": True} | ci
    await on.platform.ci.configure(on.alice, app_id, **settings)  # type: ignore[arg-type]
    return app_id, done.webhook_secret


async def _push(on: OnFakes, app_id: int, secret: str, sha: str, message: str) -> str:
    body = push_payload(sha, message)
    outcome = await on.platform.repos.push(app_id, body, sign(secret, body), "push")
    await on.platform.ci.settle()
    return outcome.status


async def test_a_green_push_is_tested_then_deployed_at_that_commit(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, secret = await _connected(on, repo)
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    assert await _push(on, app_id, secret, sha, "v2") == "testing"
    [run] = await on.platform.ci.runs(on.alice, app_id, offset=0, limit=10)
    assert (run.number, run.state, run.commit, run.trigger) == (1, "passed", sha, "push")
    [deployment] = await on.platform.deploys.store.for_app(app_id, offset=0, limit=10)
    assert (deployment.state, deployment.source["commit"]) == (states.LIVE, sha)
    assert run.deployment == deployment.number
    assert run.message == "v2"
    assert run.started_at is not None
    assert run.finished_at is not None


async def test_a_red_push_deploys_nothing_and_its_log_says_why(on: OnFakes, repo: BareRepo) -> None:
    app_id, secret = await _connected(on, repo, test_command="echo $TOKEN; echo boom >&2; false")
    # not a secret: a run gets no secret unless the spec says ci.secrets; every env value is
    # masked in its log (a courtesy)
    await on.platform.env.set_vars(on.alice, app_id, {"TOKEN": "s3cr3t-value"}, secret=False)
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    assert await _push(on, app_id, secret, sha, "v2") == "testing"
    run = await on.platform.ci.run(on.alice, app_id, 1)
    assert (run.state, run.exit_code, run.deployment) == ("failed", 1, None)
    assert "boom" in run.log
    assert "s3cr3t-value" not in run.log  # the app's env values are masked in CI logs too
    assert "[masked:TOKEN]" in run.log
    assert await on.platform.deploys.store.for_app(app_id, offset=0, limit=10) == []
    listed = await on.platform.ci.runs(on.alice, app_id, offset=0, limit=10)
    assert [(r.number, r.state, r.log) for r in listed] == [(1, "failed", "")]  # no log listed


async def test_require_green_refuses_a_deploy_of_a_commit_without_a_passed_run(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, secret = await _connected(on, repo, require_green=True, auto_deploy=False)
    with pytest.raises(FailedPrecondition, match="no passing CI run"):
        await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)
    red = repo.commit({"status": "red\n"}, "drop ok")  # the test now fails
    assert await _push(on, app_id, secret, red, "drop ok") == "testing"
    with pytest.raises(FailedPrecondition, match=r"its last run #1 is failed"):
        await on.platform.deployments.deploy(on.alice, app_id, wait_s=None, commit=red)
    green = repo.commit({"status": "green\n"}, "ok again")
    await _push(on, app_id, secret, green, "ok again")
    assert (await on.platform.ci.run(on.alice, app_id, 2)).state == "passed"
    assert (await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)).live
    with pytest.raises(FailedPrecondition):  # still refused: that commit is red
        await on.platform.deployments.deploy(on.alice, app_id, wait_s=None, commit=red)


async def test_a_manual_trigger_runs_a_given_commit_and_refuses_one_not_in_the_branch(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, _ = await _connected(on, repo, auto_deploy=False)
    first = repo.first  # type: ignore[attr-defined]
    repo.commit({"status": "red\n"}, "red head")
    record, task = await on.platform.ci.trigger(on.alice, app_id, first)
    assert (record.trigger, record.state, record.commit) == ("manual", "queued", first)
    assert (await task).state == "passed"
    _, task = await on.platform.ci.trigger(on.alice, app_id)  # the branch head
    assert (await task).state == "failed"
    with pytest.raises((InvalidArgument, FailedPrecondition, NotFound)):
        await on.platform.ci.trigger(on.alice, app_id, "f" * 40)
    with pytest.raises(InvalidArgument, match="full 40-character"):
        await on.platform.ci.trigger(on.alice, app_id, "HEAD~1")


async def test_a_run_over_its_time_limit_ends_timed_out(on: OnFakes, repo: BareRepo) -> None:
    app_id, secret = await _connected(on, repo, test_command="sleep 30", timeout_seconds=1)
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    await _push(on, app_id, secret, sha, "v2")
    run = await on.platform.ci.run(on.alice, app_id, 1)
    assert (run.state, run.deployment) == ("timed_out", None)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"test_command": ""}, "must not be empty"),
        ({"test_command": "   "}, "must not be empty"),
        ({"test_command": "x" * 4001}, "longer than 4000"),
        ({"test_command": "true\0rm -rf /"}, "NUL"),
        ({"test_command": "true", "timeout_seconds": 0}, "1 to 3600"),
        ({"test_command": "true", "timeout_seconds": -5}, "1 to 3600"),
        ({"test_command": "true", "timeout_seconds": 2**63}, "1 to 3600"),
        ({"test_command": "true", "strategy": "yolo\n"}, "unknown strategy"),
        ({"test_command": "true", "branch": "other"}, "follows the connected branch"),
    ],
)
async def test_absurd_configurations_are_refused(
    on: OnFakes, repo: BareRepo, settings: dict[str, object], message: str
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    await on.platform.repos.connect(on.alice, app_id, str(repo.bare))
    with pytest.raises(InvalidArgument, match=message):
        await on.platform.ci.configure(on.alice, app_id, **settings)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        await on.platform.ci.get(on.alice, app_id)


async def test_ci_needs_a_repository_a_developer_and_the_callers_own_tenant(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    with pytest.raises(FailedPrecondition, match="no connected repository"):
        await on.platform.ci.configure(on.alice, app_id, test_command="true")
    await on.platform.repos.connect(on.alice, app_id, str(repo.bare))
    with pytest.raises(NotFound):  # another tenant's app does not exist for eve
        await on.platform.ci.configure(on.eve, app_id, test_command="true")
    with pytest.raises(NotFound):
        await on.platform.ci.runs(on.eve, app_id, offset=0, limit=10)
    await on.platform.apps.grant(on.alice, app_id, "bob", "viewer")
    with pytest.raises(PermissionDenied):
        await on.platform.ci.configure(on.bob, app_id, test_command="true")
    await on.platform.ci.configure(on.alice, app_id, test_command="true")
    assert (await on.platform.ci.get(on.bob, app_id)).config.test_command == "true"


async def test_without_ci_a_push_follows_the_connections_own_rule(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    done = await on.platform.repos.connect(on.alice, app_id, str(repo.bare), auto_deploy=True)
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    body = push_payload(sha, "v2")
    outcome = await on.platform.repos.push(app_id, body, sign(done.webhook_secret, body), "push")
    assert outcome.status == "deploying"
    await on.platform.repos.settle()
    assert await on.platform.ci.runs(on.alice, app_id, offset=0, limit=10) == []
    assert await on.platform.ci.status(app_id) is None


async def test_runs_are_numbered_densely_under_concurrent_pushes(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, secret = await _connected(on, repo, auto_deploy=False)
    head = repo.commit({"n": "1"}, "c")
    # six deliveries of the branch's head (a push acts only on the current head), told apart
    bodies = [push_payload(head, f"c{n}") for n in range(6)]
    await asyncio.gather(
        *(on.platform.repos.push(app_id, b, sign(secret, b), "push") for b in bodies)
    )
    await on.platform.ci.settle()
    runs = await on.platform.ci.runs(on.alice, app_id, offset=0, limit=50)
    assert sorted(r.number for r in runs) == [1, 2, 3, 4, 5, 6]
    assert {r.state for r in runs} == {"passed"}
    status = await on.platform.ci.status(app_id)
    assert status is not None
    assert (status.configured, status.last_run_number, status.last_run_state) == (
        True,
        6,
        "passed",
    )


async def test_runs_a_dead_server_left_running_end_as_errors_at_start(
    on: OnFakes, repo: BareRepo, storage: Storage
) -> None:
    app_id, _ = await _connected(on, repo)
    store = CIStore(storage.engine)
    for state in ("queued", "running"):
        await store.create_run(
            app_id,
            commit=repo.first,  # type: ignore[attr-defined]
            message="m",
            branch="main",
            trigger="push",
            created_by=on.alice.user,
            instance_id="dead-server",
            state=state,
        )
    ci: CIService = on.platform.ci
    assert await ci.start() == 2
    runs = await ci.runs(on.alice, app_id, offset=0, limit=10)
    assert {(r.state, r.status_message) for r in runs} == {
        ("error", "interrupted: the server restarted during the run")
    }


async def test_runs_report_their_progress_as_the_ci_commit_status(
    on: OnFakes, repo: BareRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[tuple[str, str, str]] = []

    async def report(app_id: int, sha: str, state: str, context: str, text: str) -> bool:
        reported.append((sha, state, context))
        return True

    monkeypatch.setattr(on.platform.repos.sources, "report_status", report)  # CI reports there
    app_id, secret = await _connected(on, repo, auto_deploy=False)
    green = repo.commit({"app.py": "print('v2')\n"}, "v2")
    await _push(on, app_id, secret, green, "v2")
    red = repo.commit({"status": "red\n"}, "red")
    await _push(on, app_id, secret, red, "red")
    assert reported == [
        (green, "pending", "appdeck/ci"),
        (green, "success", "appdeck/ci"),
        (red, "pending", "appdeck/ci"),
        (red, "failure", "appdeck/ci"),
    ]


async def test_at_most_ten_runs_wait_per_app_and_more_pushes_are_recorded_untested(
    on: OnFakes, repo: BareRepo, tmp_path: Path
) -> None:
    release = tmp_path / "release"  # every run waits for it (at most 10 s), so none ends early
    wait = f"for i in $(seq 200); do [ -e {release} ] && exit 0; sleep 0.05; done; exit 1"
    app_id, secret = await _connected(on, repo, auto_deploy=False, test_command=wait)
    head = repo.commit({"n": "1"}, "c")
    bodies = [push_payload(head, f"c{n}") for n in range(13)]  # 13 deliveries of the head
    outcomes = await asyncio.gather(
        *(on.platform.repos.push(app_id, b, sign(secret, b), "push") for b in bodies)
    )
    release.touch()
    await on.platform.ci.settle()
    assert sorted(o.status for o in outcomes) == ["ignored"] * 3 + ["testing"] * 10
    assert len(await on.platform.ci.runs(on.alice, app_id, offset=0, limit=50)) == 10


async def test_only_the_last_runs_of_an_app_are_kept(
    on: OnFakes, repo: BareRepo, storage: Storage
) -> None:
    app_id, _ = await _connected(on, repo)
    store = CIStore(storage.engine)
    for _ in range(5):
        await store.create_run(
            app_id,
            commit=repo.first,  # type: ignore[attr-defined]
            message="m",
            branch="main",
            trigger="push",
            created_by=on.alice.user,
            instance_id="test",
            state="passed",
        )
    assert await store.prune(app_id, keep=2) == 3
    runs = await store.runs(app_id, offset=0, limit=10)
    assert [r.number for r in runs] == [5, 4]


async def test_deleting_the_app_cancels_its_running_run_cleanly(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id, secret = await _connected(on, repo, test_command="sleep 30")
    sha = repo.commit({"app.py": "print('v2')\n"}, "v2")
    body = push_payload(sha, "v2")
    await on.platform.repos.push(app_id, body, sign(secret, body), "push")
    for _ in range(100):  # until it runs (bounded: 10 s)
        if (await on.platform.ci.run(on.alice, app_id, 1)).state == "running":
            break
        await asyncio.sleep(0.1)
    ci = on.platform.ci
    on.platform.apps.on_delete(lambda app: ci.cancel_all(app.id))  # as Platform.build wires it
    await on.platform.apps.delete(on.alice, app_id, confirmed=True)
    async with asyncio.timeout(10):
        await on.platform.ci.settle()  # the run task ended (cancelled), no error left behind
    with pytest.raises(NotFound):
        await on.platform.ci.runs(on.alice, app_id, offset=0, limit=10)
