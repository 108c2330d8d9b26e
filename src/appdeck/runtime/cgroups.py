"""Resource limits of sandboxed instances through cgroups: v2 (unified) or v1 (a hierarchy
per controller), whichever the host has writable.

Each instance gets a group ``<name>/<key>`` (under every controller's mount on v1; ``name``
is the install's, ``appdeck/<install id>``: see :mod:`.install`) with a
memory limit (swap included where the host accounts it), a process-count limit and a CPU
quota. The instance's shim joins the group before it starts the app, so the app and all it
forks are counted; nothing it does can leave the group (moving a process needs root outside
its sandbox). When the instance ends, :meth:`Cgroups.remove` kills whatever is still in the
group and removes it.

On hosts where neither is writable the driver falls back to rlimits (see
:mod:`.sandbox`): weaker (``RLIMIT_NPROC`` counts the app's uid, not one instance), and said so
at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

log = logging.getLogger("appdeck.runtime")

ROOT: Final = Path("/sys/fs/cgroup")
_V1_CONTROLLERS: Final = ("memory", "pids", "cpu")
_V1_ACCOUNTING: Final = "cpuacct"
"""v1's CPU usage (``cpuacct.usage``): its own hierarchy on some hosts, mounted with ``cpu``
on others (``cpu,cpuacct``); used when present, never required."""
_CPU_PERIOD_US: Final = 100_000


@dataclass(frozen=True, slots=True)
class Limits:
    """What one instance may use."""

    memory_mb: int = 512
    cpus: float = 1.0
    pids: int = 256


@dataclass(frozen=True, slots=True)
class Usage:
    """What one instance's group uses now: memory in bytes, CPU seconds so far (None: the
    host does not account it)."""

    memory_bytes: int | None
    cpu_seconds: float | None


@dataclass(frozen=True, slots=True)
class Group:
    """One instance's cgroup: the files its shim writes its pid to, and where OOM kills are
    counted (``oom_kill N`` in both v1's ``memory.oom_control`` and v2's ``memory.events``)."""

    procs: tuple[Path, ...]
    oom_events: Path | None


class Cgroups:
    """Creates, limits and removes instance groups under ``<mount>/<name>`` (``name`` may
    have several levels: ``appdeck/<install id>``)."""

    def __init__(self, version: int, root: Path = ROOT, name: str = "appdeck") -> None:
        self.version = version
        self.root = root
        self.name = name
        self._own_accounting: Path | Literal[False] | None = None

    @classmethod
    def detect(cls, root: Path = ROOT, name: str = "appdeck") -> Cgroups | None:
        """The host's writable cgroup hierarchy, or None (no cgroups we may manage)."""
        if (root / "cgroup.controllers").is_file():
            found = cls(2, root, name)
            try:
                wanted = {"memory", "pids", "cpu"}
                available = set((root / "cgroup.controllers").read_text().split())
                if not wanted <= available:
                    return None
                _enable(root, wanted)
                base = root
                for part in Path(name).parts:  # each level delegates the controllers down
                    base = base / part
                    base.mkdir(exist_ok=True)
                    _enable(base, wanted)
            except OSError:
                return None
            return found
        if all((root / controller).is_dir() for controller in _V1_CONTROLLERS):
            try:
                for controller in _V1_CONTROLLERS:
                    (root / controller / name).mkdir(parents=True, exist_ok=True)
            except OSError:
                return None
            found = cls(1, root, name)
            if found._accounting() is not None:
                with contextlib.suppress(OSError):
                    (root / _V1_ACCOUNTING / name).mkdir(parents=True, exist_ok=True)
            return found
        return None

    def _accounting(self) -> Path | None:
        """v1: cpuacct's own hierarchy, when it is not the ``cpu`` one (None: none, or
        the same as ``cpu``'s: its files are in the cpu group). Looked up once."""
        if self._own_accounting is not None:
            return self._own_accounting or None
        mount = self.root / _V1_ACCOUNTING
        own = mount.is_dir() and mount.resolve() != (self.root / "cpu").resolve()
        self._own_accounting = mount if own else False
        return mount if own else None

    def _dirs(self, key: str) -> list[Path]:
        if self.version == 2:
            return [self.root / self.name / key]
        dirs = [self.root / controller / self.name / key for controller in _V1_CONTROLLERS]
        accounting = self._accounting()
        if accounting is not None and (accounting / self.name).is_dir():
            dirs.append(accounting / self.name / key)
        return dirs

    def create(self, key: str, limits: Limits) -> Group:
        """A fresh group for ``key`` with ``limits`` (an old one of that key is removed)."""
        self.remove(key)
        dirs = self._dirs(key)
        for directory in dirs:
            directory.mkdir()
        memory = limits.memory_mb * 1024 * 1024
        pids = str(limits.pids + 4)  # the shim and the sandbox's own two processes
        quota = max(1000, int(limits.cpus * _CPU_PERIOD_US))
        if self.version == 2:
            group = dirs[0]
            _write(group / "memory.max", str(memory))
            with contextlib.suppress(OSError):
                _write(group / "memory.swap.max", "0")
            _write(group / "pids.max", pids)
            _write(group / "cpu.max", f"{quota} {_CPU_PERIOD_US}")
            return Group((group / "cgroup.procs",), group / "memory.events")
        memory_dir, pids_dir, cpu_dir = dirs[:3]
        _write(memory_dir / "memory.limit_in_bytes", str(memory))
        with contextlib.suppress(OSError):  # swap accounting may be off
            _write(memory_dir / "memory.memsw.limit_in_bytes", str(memory))
        _write(pids_dir / "pids.max", pids)
        _write(cpu_dir / "cpu.cfs_period_us", str(_CPU_PERIOD_US))
        _write(cpu_dir / "cpu.cfs_quota_us", str(quota))
        return Group(tuple(d / "cgroup.procs" for d in dirs), memory_dir / "memory.oom_control")

    def oom_events(self, key: str) -> Path:
        """Where ``key``'s group counts its OOM kills (see :class:`Group`)."""
        if self.version == 2:
            return self.root / self.name / key / "memory.events"
        return self.root / "memory" / self.name / key / "memory.oom_control"

    def usage(self, key: str) -> Usage:
        """Memory (v2 ``memory.current``, v1 ``memory.usage_in_bytes``) and CPU time (v2
        ``cpu.stat`` ``usage_usec``, v1 ``cpuacct.usage`` in ns) of ``key``'s group now;
        None for what cannot be read (no such group). Two small reads of the kernel's
        counters: cheap enough for every scrape."""
        if self.version == 2:
            group = self.root / self.name / key
            memory = _number(group / "memory.current")
            usec = _stat(group / "cpu.stat", "usage_usec")
            return Usage(memory, None if usec is None else usec / 1e6)
        memory = _number(self.root / "memory" / self.name / key / "memory.usage_in_bytes")
        accounting = self._accounting() or self.root / "cpu"
        nsec = _number(accounting / self.name / key / "cpuacct.usage")
        return Usage(memory, None if nsec is None else nsec / 1e9)

    def pids(self, key: str) -> set[int]:
        found: set[int] = set()
        for directory in self._dirs(key):
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in (directory / "cgroup.procs").read_text().split())
        return found

    def remove(self, key: str, *, within_s: float = 2.0) -> None:
        """Kill everything still in the group, then remove it (a no-op when there is none)."""
        dirs = [d for d in self._dirs(key) if d.is_dir()]
        if not dirs:
            return
        deadline = time.monotonic() + within_s
        while True:
            left = self.pids(key)
            if not left:
                break
            if self.version == 2:
                with contextlib.suppress(OSError):
                    _write(dirs[0] / "cgroup.kill", "1")
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                log.warning("cgroup %s still holds processes %s", key, sorted(left))
                return
            time.sleep(0.02)
        for directory in dirs:
            for _ in range(50):  # the kernel frees an emptied group a moment later
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def remove_empty(name: str, root: Path = ROOT) -> None:
    """Remove the (empty) group ``name`` and nothing else: of an install that is gone. A
    group that still holds anything (an instance of it still runs) stays."""
    controllers = (*_V1_CONTROLLERS, _V1_ACCOUNTING)
    for directory in (root / name, *(root / c / name for c in controllers)):
        with contextlib.suppress(OSError):
            directory.rmdir()


def oom_kills(events: Path | None) -> int:
    """How many processes of the group the OOM killer killed so far (0 when unknown)."""
    if events is None:
        return 0
    try:
        for line in events.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _read(path: Path) -> bytes:
    """A small kernel file, with two syscalls and no buffering (a third of the time of
    ``Path.read_bytes`` here: a scrape reads two per instance)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _number(path: Path) -> int | None:
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stat(path: Path, field: str) -> int | None:
    try:
        for line in _read(path).decode("ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == field:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def _enable(group: Path, controllers: set[str]) -> None:
    control = group / "cgroup.subtree_control"
    enabled = set(control.read_text().split())
    missing = controllers - enabled
    if missing:
        _write(control, " ".join(f"+{c}" for c in sorted(missing)))


def _write(path: Path, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)
