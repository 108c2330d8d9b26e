"""``BuiltHereRunThere``: which side each call of the driver seam goes to (the builder builds
and keeps workspaces; the runner runs). Both sides are recording fakes here; the real ones
together are tests/test_kube_setup.py."""

from __future__ import annotations

from typing import Any

from appdeck.model.release import AppSpec, Release
from appdeck.runtime.composite import BuiltHereRunThere
from appdeck.runtime.driver import Capabilities, LogPage
from appdeck.runtime.kubernetes.driver import CAPABILITIES

RUNNER_CAPS = CAPABILITIES  # the Kubernetes driver's


class Side:
    """Records every call; answers with its own name where an answer is needed."""

    def __init__(self, name: str, releases: list[str]) -> None:
        self.name = name
        self.calls: list[str] = []
        self._releases = releases

    def capabilities(self) -> Capabilities:
        return RUNNER_CAPS

    def __getattr__(self, method: str) -> Any:
        async def call(*_args: object, **_kwargs: object) -> object:
            self.calls.append(method)
            if method == "releases":
                return self._releases
            if method in ("logs", "follow"):
                return LogPage([], hash(self.name) % 1000)
            return None

        return call


def composite() -> tuple[BuiltHereRunThere, Side, Side]:
    builder, runner = Side("builder", ["7-1", "7-2"]), Side("runner", ["7-2", "8-1"])
    return BuiltHereRunThere(builder, runner), builder, runner  # type: ignore[arg-type]


async def test_the_builder_builds_and_serves_workspaces_the_runner_runs() -> None:
    driver, builder, runner = composite()
    release = Release(7, "shop", 1, AppSpec(), route="shop--acme")
    await driver.prepare(release)
    await driver.workspace_tar("7-1", 1024)
    await driver.start(release, 0)
    await driver.stop("7-1")
    await driver.recover(release)
    assert builder.calls == ["prepare", "workspace_tar"]
    assert runner.calls == ["start", "stop", "recover"]
    assert driver.capabilities() == RUNNER_CAPS


async def test_build_logs_are_the_builders_and_runtime_logs_the_runners() -> None:
    driver, builder, runner = composite()
    await driver.logs("7-1", "build")
    await driver.follow("7-1", "build", timeout_s=0)
    await driver.logs("7-1", "runtime")
    assert (builder.calls, runner.calls) == (["logs", "follow"], ["logs"])


async def test_releases_are_both_sides_and_removal_goes_to_both() -> None:
    driver, builder, runner = composite()
    assert await driver.releases() == ["7-1", "7-2", "8-1"]
    await driver.remove("7-1")
    await driver.remove_app(7)
    await driver.detach()
    assert runner.calls[1:] == builder.calls[1:] == ["remove", "remove_app", "detach"]
