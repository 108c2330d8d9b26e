"""A failed build's log tail (app output: it may print the app's secrets, or instructions to
an agent) never reaches a tool caller, whichever operation built the release: a deploy, a cold
rollback, a start, a restart after a server restart (every ``prepare`` the engine makes goes
through :func:`appdeck.platform.deploy.builds.build`)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from appdeck.common.errors import AppDeckError
from appdeck.model.release import AppSpec
from appdeck.platform.deploy.builds import build
from appdeck.platform.deploy.ports import BuildFailed, Release
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes, shop_spec

from .fakes import FakeDriver

TAIL = "TAIL-7f3a: the build printed GREETING=bonjour-secret"


@dataclass
class TailingDriver(FakeDriver):
    """A driver whose builds fail, once ``failing``, with a tail of app output."""

    failing: bool = False

    async def prepare(self, release: Release, *, rebuild: bool = False) -> None:
        await super().prepare(release, rebuild=rebuild)
        if self.failing:
            raise BuildFailed(
                "the build command exited with status 2",
                release_id=release.release_id,
                step="build_command",
                exit_code=2,
                log_tail=[TAIL],
            )


def _said(exc: AppDeckError) -> str:
    """Everything of an error a tool result carries (and the tail, were it kept)."""
    return json.dumps([exc.to_dict(), str(exc), getattr(exc, "log_tail", None)], default=str)


async def test_the_build_step_strips_the_tail_and_says_where_the_log_is() -> None:
    driver = TailingDriver(failing=True)
    spec = AppSpec.from_dict({"run_command": "python3 app.py"})
    release = Release(1, "shop", 1, spec, {}, "shop--acme", Path("/nowhere"))
    with pytest.raises(BuildFailed) as failed:
        await build(driver, release)
    assert failed.value.log_tail == []
    assert failed.value.message == (
        "the build command exited with status 2; read the build log (tail_deploy_logs with "
        "kind 'build')"
    )
    assert (failed.value.step, failed.value.exit_code) == ("build_command", 2)
    assert TAIL not in _said(failed.value)


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path, driver=TailingDriver())


async def test_no_operation_hands_out_a_build_tail(
    on: OnFakes, caplog: pytest.LogCaptureFixture
) -> None:
    driver = on.runtime
    assert isinstance(driver, TailingDriver)
    deployments = on.platform.deployments
    app_id = (await on.platform.apps.register(on.alice, "shop", shop_spec(on.source))).app.id
    for _ in range(2):
        assert (await deployments.deploy(on.alice, app_id, wait_s=None)).live
    driver.failing = True

    failed = await deployments.deploy(on.alice, app_id, wait_s=None)  # engine.py's build
    assert failed.record.state == "failed"
    assert "exited with status 2" in (failed.record.status_message or "")
    assert TAIL not in json.dumps(failed.public(), default=str)

    with pytest.raises(AppDeckError) as rollback:  # release 1 is cold: built again
        await deployments.rollback(on.alice, app_id)
    assert "exited with status 2" in rollback.value.message
    assert TAIL not in _said(rollback.value)

    await deployments.stop(on.alice, app_id)
    driver.running_.clear()  # release 2's instances are gone: a start builds it again
    with pytest.raises(AppDeckError) as start:
        await deployments.start(on.alice, app_id)
    assert "exited with status 2" in start.value.message
    assert TAIL not in _said(start.value)

    await on.platform.apps.store.update(app_id, stopped=False)  # a restart brings it back
    with caplog.at_level(logging.ERROR, logger="appdeck.deploy"):
        await on.platform.deploys.reconcile()
    assert "exited with status 2" in caplog.text
    assert TAIL not in caplog.text
