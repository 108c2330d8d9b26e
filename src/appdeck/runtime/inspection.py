"""What the local driver tells of its instances without being asked to change them: their
state, restarts, last exit, OOM kills, memory and CPU (:meth:`inspect`), the app's disk
against its quota (:meth:`disk_usage`), and the crashes, restarts and OOM kills as they
happen (:meth:`watch`).

Everything here is the platform's own reading: counts, an exit status or a signal's name,
bytes from the instance's cgroup. Nothing the app wrote (its output, its process names)
reaches these facts, so they may be shown and labelled without escaping tenant text.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from appdeck.common.errors import InvalidArgument
from appdeck.runtime.cgroups import ROOT, Cgroups, Usage, oom_kills
from appdeck.runtime.core import DriverCore
from appdeck.runtime.disks import MIB, split
from appdeck.runtime.driver import (
    DiskUsage,
    InstanceCondition,
    InstanceStatus,
)
from appdeck.runtime.model import (
    InstanceState,
    ReleaseState,
    check_release_id,
    exit_words,
    instance_key,
)
from appdeck.runtime.shim import boot_id, is_running
from appdeck.runtime.state import load_instances

NO_USAGE = Usage(None, None)


class InspectionMixin(DriverCore):
    """``inspect`` and ``disk_usage`` (``watch`` is the core's: supervision tells)."""

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        """The instances this process supervises, and those another replica on this host
        started (read from ``instances.json``: replicas share the data dir)."""
        try:
            state = self._existing(release_id)
        except InvalidArgument:
            return []
        if state is None:
            return []
        found: dict[int, InstanceStatus] = {}
        for index, instance in list(state.given_up.items()):
            found[index] = self._status(state, instance, "crash_loop")
        for index, instance in list(state.instances.items()):
            condition: InstanceCondition = "running" if instance.pid is not None else "restarting"
            if instance.stopping:
                condition = "stopped"
            found[index] = self._status(state, instance, condition)
        cgroups = self.sandbox.cgroups if self.sandbox is not None else None
        for other in recorded(state.directory, self._boot_id, cgroups, skip=found)[0]:
            found[other.index] = other
        return [found[i] for i in sorted(found)]

    def _status(
        self, state: ReleaseState, instance: InstanceState, condition: InstanceCondition
    ) -> InstanceStatus:
        usage = NO_USAGE
        cgroups = self.sandbox.cgroups if self.sandbox is not None else None
        if cgroups is not None and condition == "running":
            usage = cgroups.usage(instance_key(state, instance))
        return InstanceStatus(
            index=instance.index,
            state=condition,
            restarts=instance.restarts,
            last_exit=instance.last_exit(),
            oom_kills=instance.oom_kills + oom_kills(instance.oom_events),
            memory_bytes=usage.memory_bytes,
            cpu_seconds=usage.cpu_seconds,
            started_at=instance.started_at if condition == "running" else None,
        )

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        disks = self.disks
        if disks is None or disks.mode == "off":
            return None
        quota = self._quota_mb(app_id)
        if disks.kernel:
            return mounted_usage(disks.mount_point(app_id))
        measured = self._disk_used.get(app_id)
        return None if measured is None else DiskUsage(measured, quota * MIB)

    def _quota_mb(self, app_id: int) -> int:
        """The image's share of the app's disk (its ``/tmp`` has the rest), from its
        running release's spec (else the operator's default)."""
        for state in list(self._releases.values()):
            release = state.release
            if release is not None and release.app_id == app_id and state.instances:
                return split(self._disk_mb(release)).image_mb
        default = self.disks.default_mb if self.disks is not None else 1024
        return split(default).image_mb


def recorded(
    directory: Path,
    boot_id: str,
    cgroups: Cgroups | None = None,
    *,
    skip: Collection[int] = (),
) -> tuple[list[InstanceStatus], bool]:
    """A release's instances as its ``instances.json`` records them, for a process that
    supervises none of them (the operator's CLI): running or not, restarts, the last exit
    and OOM kills as of the last restart, memory and CPU from ``cgroups``; and whether the
    release was marked unhealthy (a crash loop: its given-up instances have no record).
    ``skip``: indexes the caller knows already (not read)."""
    found, unhealthy = load_instances(directory, boot_id)
    release_id = directory.name
    out = []
    for index in sorted(set(found) - set(skip)):
        record = found[index]
        running = is_running(int(record["pid"]), int(record["start_ticks"]))
        usage = NO_USAGE
        if running and cgroups is not None:
            usage = cgroups.usage(f"{release_id}.{index}")
        code = record.get("last_code")
        out.append(
            InstanceStatus(
                index=index,
                state="running" if running else "restarting",
                restarts=_count(record.get("restarts")),
                last_exit=exit_words(code if isinstance(code, int) else None),
                oom_kills=_count(record.get("oom_kills")),
                memory_bytes=usage.memory_bytes,
                cpu_seconds=usage.cpu_seconds,
                started_at=float(record["started_at"]) if running else None,
            )
        )
    return out, unhealthy


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def recall(instance: InstanceState, record: dict[str, Any], oom_events: Path | None) -> None:
    """An adopted instance keeps what its record counted, and its group's OOM count."""
    instance.restarts = _count(record.get("restarts"))
    instance.oom_kills = _count(record.get("oom_kills"))
    code = record.get("last_code")
    instance.last_code = code if isinstance(code, int) else None
    instance.oom_events = oom_events


class RecordedInstances:
    """The instances of the releases under ``runtime_dir`` as their records say (see
    :func:`recorded`), for a process that runs none of them: the operator's CLI."""

    def __init__(
        self, runtime_dir: Path, cgroups: Cgroups | None, disks: Path | None = None
    ) -> None:
        self.runtime_dir = runtime_dir
        self.cgroups = cgroups
        self.disks = disks
        """``<data dir>/disks``: the apps' mounted disks (loop mode), if any."""
        self.unhealthy: set[str] = set()
        """Releases found marked unhealthy (a crash loop)."""

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        check_release_id(release_id)
        for directory in self.runtime_dir.glob(f"apps/*/releases/{release_id}"):
            found, unhealthy = recorded(directory, boot_id(), self.cgroups)
            if unhealthy:
                self.unhealthy.add(release_id)
            return found
        return []

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        if self.disks is None:
            return None
        return mounted_usage(self.disks / str(int(app_id)))


def mounted_usage(point: Path) -> DiskUsage | None:
    """A mounted app disk's use and size (loop mode); None when it is not mounted."""
    with contextlib.suppress(OSError):
        if os.path.ismount(point):
            found = os.statvfs(point)
            used = (found.f_blocks - found.f_bfree) * found.f_frsize
            return DiskUsage(used, found.f_blocks * found.f_frsize)
    return None


def host_cgroups(name: str) -> Cgroups | None:
    """The host's hierarchy of the install's groups ``name``, to read (never to create)."""
    if (ROOT / "cgroup.controllers").is_file():
        return Cgroups(2, ROOT, name)
    if (ROOT / "memory").is_dir():
        return Cgroups(1, ROOT, name)
    return None
