"""Provisional copies of the target driver seam (docs/runtime-seam.md §2.1 and §2.2).

The ``seam`` lane is adding :class:`Instance`, :class:`Readiness`, :class:`Adoption`,
:class:`Capabilities` and :class:`Driver` to :mod:`appdeck.runtime.driver` at the same time as
the Kubernetes driver is written. Until that lands, the Kubernetes driver is typed against these
copies, with exactly the plan's names and fields. **The merger replaces this module by imports
from** :mod:`appdeck.runtime.driver` (and deletes it); nothing here may grow beyond the plan.

The types that stay as they are (``InstanceStatus``, ``InstanceEvent``, ``DiskUsage``,
``LogPage``, ``LogKind``) are imported from :mod:`appdeck.runtime.driver`, which is pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from appdeck.model.release import Release
from appdeck.runtime.driver import (
    DiskUsage,
    InstanceStatus,
    InstanceWatcher,
    LogKind,
    LogPage,
)


@dataclass(frozen=True, slots=True)
class Instance:
    """One started instance, as traffic reaches it (replaces ``InstanceRef`` and
    ``ports.Instance``)."""

    release_id: str
    index: int
    upstream: str
    """What the router gets: ``127.0.0.1:p``, ``<netns>@127.0.0.1:p`` or ``svc.ns:p``."""
    started_at: float
    """The driver's clock, epoch seconds."""


@dataclass(frozen=True, slots=True)
class Readiness:
    ok: bool
    why: str
    """Words for a RolloutFailed when not ok."""


@dataclass(frozen=True, slots=True)
class Adoption:
    adopted: list[Instance]
    dead: list[int]
    """Indexes to start again."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    own_network: bool
    """Each instance has its own network: the spec's port is used as is."""
    namespaced_upstreams: bool
    """Upstreams are ``<netns>@…``: the data plane needs netns fds from the driver."""
    host_processes: bool
    """Instances are processes of this host: shared by replicas on it; pids to diagnose."""
    in_place_restart: bool
    """One index of a release can be stopped and started again with a fresh env."""
    indexed_instances: bool
    """Instances are addressable by index (``stop(release, i)``, a spare at index n)."""
    driver_grep: bool
    """``logs(grep=…)`` filters on the driver's side."""
    app_disks: bool
    """Per-app disks (hosted repos and SQLite placed on them)."""


class Driver(Protocol):
    def capabilities(self) -> Capabilities: ...
    async def prepare(self, release: Release, *, rebuild: bool = False) -> None: ...
    async def start(self, release: Release, index: int) -> Instance: ...
    async def wait_ready(
        self, release: Release, instance: Instance, within_s: float
    ) -> Readiness: ...
    async def gave_up(self, release_id: str) -> bool: ...
    async def stop(
        self, release_id: str, index: int | None = None, grace_s: float = 5.0
    ) -> None: ...
    async def running(self, release_id: str) -> list[Instance]: ...
    async def recover(self, release: Release) -> Adoption: ...
    def inspect(self, release_id: str) -> list[InstanceStatus]: ...
    def disk_usage(self, app_id: int) -> DiskUsage | None: ...
    def events(self, watcher: InstanceWatcher) -> None: ...
    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage: ...
    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage: ...
    async def releases(self) -> list[str]: ...
    async def remove(self, release_id: str) -> None: ...
    async def remove_app(self, app_id: int) -> None: ...
    async def detach(self) -> None: ...
