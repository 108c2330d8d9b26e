"""CI runs are counted by outcome, with their duration, as the service ends them."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from appdeck.observability import ci
from appdeck.storage import Storage
from tests.platform.on_fakes import platform_on_fakes
from tests.platform.repos.gitrepo import bare_repo


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_every_outcome_is_there_at_zero_before_any_run() -> None:
    for outcome in ci.OUTCOMES:
        assert REGISTRY.get_sample_value("appdeck_ci_runs_total", {"outcome": outcome}) is not None


def test_an_outcome_outside_the_set_counts_as_error() -> None:
    before = value("appdeck_ci_runs_total", outcome="error")
    ci.run_ended("made-up", 0.5)
    assert value("appdeck_ci_runs_total", outcome="error") == before + 1
    assert REGISTRY.get_sample_value("appdeck_ci_runs_total", {"outcome": "made-up"}) is None


async def test_a_passed_and_a_failed_run_are_counted_with_their_durations(
    storage: Storage, tmp_path: Path
) -> None:
    on = await platform_on_fakes(storage, tmp_path)
    repo = bare_repo(on.source.parent)
    green = repo.commit({"app.py": "print('v1')\n", "status": "green\n"}, "green")
    repo.commit({"status": "red\n"}, "red head")
    app_id = (await on.platform.apps.register(on.alice, "shop", {"run_command": "true"})).app.id
    await on.platform.repos.connect(on.alice, app_id, str(repo.bare))
    await on.platform.ci.configure(
        on.alice, app_id, test_command="grep -qx green status", auto_deploy=False
    )
    passed = value("appdeck_ci_runs_total", outcome="passed")
    failed = value("appdeck_ci_runs_total", outcome="failed")
    runs = value("appdeck_ci_run_seconds_count")
    seconds = value("appdeck_ci_run_seconds_sum")

    _, first = await on.platform.ci.trigger(on.alice, app_id, green)
    assert (await first).state == "passed"
    _, second = await on.platform.ci.trigger(on.alice, app_id)  # the red head
    assert (await second).state == "failed"

    assert value("appdeck_ci_runs_total", outcome="passed") == passed + 1
    assert value("appdeck_ci_runs_total", outcome="failed") == failed + 1
    assert value("appdeck_ci_run_seconds_count") == runs + 2
    assert value("appdeck_ci_run_seconds_sum") > seconds
