"""``BuiltHereRunThere``: a release built on AppDeck's host, run on a cluster.

``APPDECK_RUNTIME=kubernetes`` (docs/kubernetes.md, "Serving with APPDECK_RUNTIME=kubernetes"):
the *builder* (the local driver) does what ``prepare`` does today — the source copied into
the release's workspace, the build command run in the app's sandbox as the app's uid, the
workspace kept — and serves that workspace as ``workspace.tar``; the *runner* (the
Kubernetes driver) starts, watches, logs and stops the release's pods, whose init container
fetches that tar. The builder never starts an instance.

What each call goes to: ``capabilities`` is the runner's (the engine branches on how
releases *run*); ``prepare``, ``workspace_tar``, ``disk_usage`` and the ``build`` logs are the
builder's; ``start``, ``wait_ready``, ``gave_up``, ``stop``, ``running``, ``recover``,
``inspect``, ``events`` and the ``runtime`` logs are the runner's; ``releases`` is both
sides' (a workspace here, objects there); ``remove``, ``remove_app`` and ``detach`` go to the
runner, then the builder.
"""

from __future__ import annotations

from typing import Protocol

from appdeck.runtime.driver import (
    Adoption,
    Capabilities,
    DiskUsage,
    Driver,
    Instance,
    InstanceStatus,
    InstanceWatcher,
    LogKind,
    LogPage,
    Readiness,
    Release,
)
from appdeck.runtime.export import WorkspaceTar


class Builder(Driver, Protocol):
    """The side that builds: a driver whose built workspaces leave as tars (the local one)."""

    async def workspace_tar(self, release_id: str, max_bytes: int) -> WorkspaceTar | None: ...


class BuiltHereRunThere:
    """:class:`~appdeck.runtime.driver.Driver`: ``builder`` prepares, ``runner`` runs."""

    def __init__(self, builder: Builder, runner: Driver) -> None:
        self.builder = builder
        self.runner = runner

    def capabilities(self) -> Capabilities:
        return self.runner.capabilities()

    # -- built here ----------------------------------------------------------------------------
    async def prepare(self, release: Release, *, rebuild: bool = False) -> None:
        await self.builder.prepare(release, rebuild=rebuild)

    async def workspace_tar(self, release_id: str, max_bytes: int) -> WorkspaceTar | None:
        """The built workspace the release's pods fetch (``/internal/.../workspace.tar``)."""
        return await self.builder.workspace_tar(release_id, max_bytes)

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        return self.builder.disk_usage(app_id)

    # -- run there -----------------------------------------------------------------------------
    async def start(self, release: Release, index: int) -> Instance:
        return await self.runner.start(release, index)

    async def wait_ready(self, release: Release, instance: Instance, within_s: float) -> Readiness:
        return await self.runner.wait_ready(release, instance, within_s)

    async def gave_up(self, release_id: str) -> bool:
        return await self.runner.gave_up(release_id)

    async def stop(self, release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        await self.runner.stop(release_id, index, grace_s)

    async def running(self, release_id: str) -> list[Instance]:
        return await self.runner.running(release_id)

    async def recover(self, release: Release) -> Adoption:
        return await self.runner.recover(release)

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        return self.runner.inspect(release_id)

    def events(self, watcher: InstanceWatcher) -> None:
        self.runner.events(watcher)

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage:
        return await self._logs_of(kind).logs(release_id, kind, cursor, limit, grep)

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage:
        return await self._logs_of(kind).follow(release_id, kind, cursor, limit, grep, timeout_s)

    def _logs_of(self, kind: LogKind) -> Driver:
        """The build log is the builder's (the build ran here), the runtime log the runner's."""
        return self.builder if kind == "build" else self.runner

    # -- both ------------------------------------------------------------------------------------
    async def releases(self) -> list[str]:
        found = {*await self.runner.releases(), *await self.builder.releases()}
        return sorted(found)

    async def remove(self, release_id: str) -> None:
        await self.runner.remove(release_id)
        await self.builder.remove(release_id)  # its workspace: no pod can fetch it any more

    async def remove_app(self, app_id: int) -> None:
        await self.runner.remove_app(app_id)
        await self.builder.remove_app(app_id)

    async def detach(self) -> None:
        await self.runner.detach()
        await self.builder.detach()


def _conforms(driver: BuiltHereRunThere) -> Driver:
    return driver  # mypy checks the composite against the seam
