"""PreflightService: every check answered at once, never a refusal for what it finds."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.common.errors import NotFound
from appdeck.platform.deploy.preflight import PreflightService
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes, shop_spec


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


def _status(found: object) -> dict[str, str]:
    return {c.name: c.status for c in found.checks}  # type: ignore[attr-defined]


async def test_a_correct_first_deploy_passes_without_a_build_command(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    found = await on.platform.preflight.check(on.alice, app_id)
    assert found.verdict == "pass", found
    assert set(_status(found).values()) == {"pass"}


async def test_an_env_change_before_the_first_deploy_needs_no_restart(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    await on.platform.env.set_vars(on.alice, app_id, {"GREETING": "hi"}, secret=False)
    found = await on.platform.preflight.check(on.alice, app_id)
    assert "restart" not in _status(found), found
    assert found.verdict == "pass", found


async def test_an_empty_spec_fails_on_source_and_run_command(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "bare")).app.id
    found = await on.platform.preflight.check(on.alice, app_id, ["API_KEY"])
    assert found.verdict == "fail"
    status = _status(found)
    assert status["source"] == status["run_command"] == status["env"] == "fail"
    env = next(c for c in found.checks if c.name == "env")
    assert "API_KEY" in env.detail


async def test_a_missing_binary_and_a_taken_port_fail_when_apps_share_the_network(
    on: OnFakes,
) -> None:
    spec = {**shop_spec(on.source), "port": 8123}
    app_id = (await on.platform.apps.register(on.alice, "shop", spec)).app.id
    shared = PreflightService(
        on.platform.apps,
        on.platform.env,
        sandboxed=False,
        which=lambda binary: None,
        port_free=lambda port: False,
    )
    status = _status(await shared.check(on.alice, app_id))
    assert status["runtime"] == "fail"
    assert status["port"] == "fail"
    sandboxed = _status(await on.platform.preflight.check(on.alice, app_id))
    assert sandboxed["port"] == "pass"  # its own network namespace: any port is free


async def test_a_source_gone_since_the_spec_was_set_fails(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    (on.source / "app.py").unlink()
    on.source.rmdir()
    assert _status(await on.platform.preflight.check(on.alice, app_id))["source"] == "fail"


async def test_a_stranger_learns_nothing(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    with pytest.raises(NotFound):
        await on.platform.preflight.check(on.eve, app_id)
