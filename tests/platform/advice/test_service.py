"""AdviceService over the real platform services (tests/platform/on_fakes.py): the state it
gathers from apps, env, deployments and repositories, CI and the API catalogue through their
ports, and who may read it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from appdeck.auth import scopes
from appdeck.common.errors import NotFound
from appdeck.common.identity import Principal
from appdeck.platform.advice.service import AdviceService
from appdeck.platform.advice.state import ApiState
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes, shop_spec
from tests.platform.repos.gitrepo import bare_repo
from tests.platform.repos.payloads import push_payload, sign


@dataclass(frozen=True)
class Status:
    configured: bool = True
    require_green: bool = True
    auto_deploy: bool = True
    last_run_number: int | None = None
    last_run_state: str | None = None
    last_run_commit: str | None = None


class FakeCI:
    def __init__(self) -> None:
        self.statuses: dict[int, Status] = {}

    async def status(self, app_id: int) -> Status | None:
        return self.statuses.get(app_id)


class FakeApis:
    def __init__(self, answer: ApiState) -> None:
        self.answer: ApiState = answer

    async def state(self, app_id: int) -> ApiState:
        return self.answer


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    """The fake platform's callers, holding every scope (as tokens minted for the tools do:
    the advice reads the caller's scopes)."""
    made = await platform_on_fakes(storage, tmp_path)
    made.alice, made.bob, made.eve = (
        replace(who, scopes=scopes.ALL) for who in (made.alice, made.bob, made.eve)
    )
    return made


def _tools(found: object) -> list[str]:
    return [s.tool for s in found.advice.steps]  # type: ignore[attr-defined]


async def test_an_app_goes_from_no_source_to_live_to_needing_a_restart(on: OnFakes) -> None:
    p, alice = on.platform, on.alice
    app_id = (await p.apps.register(alice, "shop")).app.id
    found = await p.advice.for_app(alice, app_id)
    assert (found.name, found.advice.status) == ("shop", "needs_source")
    assert _tools(found) == ["connect_repo", "set_app_spec"]
    await p.apps.set_spec(alice, app_id, shop_spec(on.source))
    found = await p.advice.for_app(alice, app_id)
    assert (found.advice.status, _tools(found)) == (
        "not_deployed",
        ["preflight_check", "deploy_app"],
    )
    await p.deployments.deploy(alice, app_id, wait_s=None)
    found = await p.advice.for_app(alice, app_id)
    assert (found.advice.status, _tools(found)) == ("ok", ["get_app_url"])
    await p.env.set_vars(alice, app_id, {"GREETING": "hi"}, secret=False)
    found = await p.advice.for_app(alice, app_id)
    assert (found.advice.status, _tools(found)) == ("needs_restart", ["restart_app"])
    await p.deployments.restart(alice, app_id)
    assert (await p.advice.for_app(alice, app_id)).advice.status == "ok"


async def test_a_failed_build_points_at_its_build_log(on: OnFakes) -> None:
    p, alice = on.platform, on.alice
    spec = {**shop_spec(on.source), "build_command": "false"}
    app_id = (await p.apps.register(alice, "shop", spec)).app.id
    await p.deployments.deploy(alice, app_id, wait_s=None)
    found = await p.advice.for_app(alice, app_id)
    assert found.advice.status == "deploy_failed"
    [step] = found.advice.steps
    assert (step.tool, dict(step.arguments)) == (
        "tail_deploy_logs",
        {"app_id": app_id, "number": 1, "kind": "build"},
    )


async def test_a_push_puts_the_live_release_behind_and_ci_decides(on: OnFakes) -> None:
    p, alice = on.platform, on.alice
    repo = bare_repo(on.source.parent)
    first = repo.commit({"app.py": "print('v1')\n"}, "v1")
    app_id = (await p.apps.register(alice, "shop", {"run_command": "python3 app.py"})).app.id
    secret = (await p.repos.connect(alice, app_id, str(repo.bare))).webhook_secret
    await p.deployments.deploy(alice, app_id, wait_s=None)
    found = await p.advice.for_app(alice, app_id)
    assert (found.advice.status, _tools(found)) == ("ok", ["get_app_url", "manage_ci"])
    second = repo.commit({"app.py": "print('v2')\n"}, "v2")
    body = push_payload(second, "v2", before=first)
    assert (await p.repos.push(app_id, body, sign(secret, body), "push")).status == "recorded"
    found = await p.advice.for_app(alice, app_id)
    assert (found.advice.status, _tools(found)) == ("behind", ["deploy_app", "manage_ci"])
    assert second[:12] in found.advice.steps[0].why

    ci = FakeCI()
    advice = AdviceService(p.apps, p.deployments, p.repos, ci=ci)
    ci.statuses[app_id] = Status(last_run_number=4, last_run_state="failed", last_run_commit=second)
    found = await advice.for_app(alice, app_id)
    assert found.advice.status == "ci_failed"
    [step] = found.advice.steps  # the gate blocks the deploy: no deploy_app
    assert dict(step.arguments) == {"action": "logs", "app_id": app_id, "number": 4}
    ci.statuses[app_id] = Status(last_run_number=5, last_run_state="passed", last_run_commit=second)
    assert _tools(await advice.for_app(alice, app_id)) == ["deploy_app"]
    ci.statuses[app_id] = Status(configured=False)
    assert _tools(await advice.for_app(alice, app_id)) == ["deploy_app", "manage_ci"]


async def test_the_api_port_adds_a_step_only_when_it_knows(on: OnFakes) -> None:
    p, alice = on.platform, on.alice
    app_id = (await p.apps.register(alice, "shop", shop_spec(on.source))).app.id
    await p.deployments.deploy(alice, app_id, wait_s=None)
    none = AdviceService(p.apps, p.deployments, p.repos, apis=FakeApis("none"))
    assert _tools(await none.for_app(alice, app_id)) == ["get_app_url", "discover_apis"]
    found = AdviceService(p.apps, p.deployments, p.repos, apis=FakeApis("found"))
    assert _tools(await found.for_app(alice, app_id)) == ["get_app_url"]


async def test_rollback_is_offered_when_the_live_commit_is_red(on: OnFakes) -> None:
    p, alice = on.platform, on.alice
    repo = bare_repo(on.source.parent)
    repo.commit({"app.py": "print('v1')\n"}, "v1")
    app_id = (await p.apps.register(alice, "shop", {"run_command": "python3 app.py"})).app.id
    await p.repos.connect(alice, app_id, str(repo.bare))
    await p.deployments.deploy(alice, app_id, wait_s=None)
    second = repo.commit({"app.py": "print('v2')\n"}, "v2")
    live = await p.deployments.deploy(alice, app_id, wait_s=None, commit=second)
    assert live.record.state == "live"
    ci = FakeCI()
    ci.statuses[app_id] = Status(last_run_number=2, last_run_state="failed", last_run_commit=second)
    found = await AdviceService(p.apps, p.deployments, p.repos, ci=ci).for_app(alice, app_id)
    assert _tools(found) == ["manage_ci", "rollback_deploy"]


async def test_other_tenants_and_strangers_get_not_found_viewers_read_only(on: OnFakes) -> None:
    p, alice, bob = on.platform, on.alice, on.bob
    app_id = (await p.apps.register(alice, "shop", shop_spec(on.source))).app.id
    for who in (on.eve, bob):
        with pytest.raises(NotFound):
            await p.advice.for_app(who, app_id)
    with pytest.raises(NotFound):
        await p.advice.for_app(alice, 2**63 - 1)
    await p.apps.grant(alice, app_id, "bob", "viewer")
    found = await p.advice.for_app(bob, app_id)
    assert (_tools(found), found.advice.withheld) == (["preflight_check"], 1)
    reader = Principal(bob.tenant, bob.user, frozenset({"apps:read"}), kind="oauth")
    found = await p.advice.for_app(reader, app_id)
    assert (_tools(found), found.advice.withheld) == ([], 2)


async def test_the_account_advice_covers_a_page_of_apps(on: OnFakes) -> None:
    p, alice = on.platform, on.alice
    empty = await p.advice.for_apps(alice, [], first_page=True)
    assert [s.tool for s in empty.advice.steps] == ["register_app"]
    new = (await p.apps.register(alice, "new")).app.id
    ready = (await p.apps.register(alice, "ready", shop_spec(on.source))).app.id
    views = await p.apps.list_apps(alice, offset=0, limit=10)
    account = await p.advice.for_apps(alice, views, first_page=True)
    assert [a.app_id for a in account.apps] == [new, ready]
    assert [(s.tool, s.arguments["app_id"]) for s in account.advice.steps] == [
        ("connect_repo", new),
        ("preflight_check", ready),
    ]
    assert (await p.advice.for_apps(on.eve, [], first_page=False)).advice.steps == ()


async def test_a_manual_rollback_is_not_called_a_failed_deploy(on: OnFakes) -> None:
    p, alice = on.platform, on.alice
    app_id = (await p.apps.register(alice, "shop", shop_spec(on.source))).app.id
    await p.deployments.deploy(alice, app_id, wait_s=None)
    await p.deployments.deploy(alice, app_id, wait_s=None)
    await p.deployments.rollback(alice, app_id)
    found = await p.advice.for_app(alice, app_id)
    assert found.advice.status == "ok", found.advice
    assert "tail_deploy_logs" not in _tools(found)
