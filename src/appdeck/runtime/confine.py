"""What a sandboxed instance's shim sets up before it starts the app (see :mod:`.shim`):
membership of the instance's cgroups, a network namespace of its own when the driver did not
hand it one, and the OOM-kill count it reports the app's end by.

Stdlib-only, like the shim, which loads it by path (``python -I -S`` runs it outside the
package).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import types
from collections.abc import Sequence
from pathlib import Path


class Confinement:
    """What a sandboxed instance's shim sets up before it starts the app: a network namespace
    of its own (loopback only) and membership of the instance's cgroups."""

    def __init__(
        self,
        *,
        netns: bool,
        cgroup_procs: Sequence[Path] = (),
        oom_events: Path | None = None,
        memory_mb: int = 0,
        stage: Sequence[tuple[Path, Path]] = (),
    ) -> None:
        self.stage = list(stage)
        """(directory, mount point) pairs: the workspace (and the app's database directory),
        bound in a mount namespace of the shim's own, so the sandbox (run as the app's uid)
        finds them where it may look."""
        self.netns = netns
        self.cgroup_procs = list(cgroup_procs)
        self.oom_events = oom_events
        self.memory_mb = memory_mb
        self._ooms = 0

    def enter(self) -> None:
        for procs in self.cgroup_procs:
            with open(procs, "w", encoding="ascii") as handle:
                handle.write(str(os.getpid()))
        self._ooms = self._oom_count()
        if self.netns:
            _netns().unshare_loopback_only()
        if self.stage:
            _bind_in_own_mount_namespace(self.stage)

    def oom_killed(self) -> bool:
        return self._oom_count() > self._ooms

    def _oom_count(self) -> int:
        if self.oom_events is None:
            return 0
        try:
            for line in self.oom_events.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0


def _netns() -> types.ModuleType:
    """``appdeck.runtime.netns``, loaded by path (this file runs outside the package)."""
    path = Path(__file__).resolve().parent / "netns.py"
    spec = importlib.util.spec_from_file_location("appdeck_netns", path)
    if spec is None or spec.loader is None:
        raise OSError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18


def _bind_in_own_mount_namespace(binds: Sequence[tuple[Path, Path]]) -> None:
    """``unshare --mount --propagation private`` and ``mount --bind`` without the three
    processes they take: this (single-threaded) process moves to a mount namespace of its
    own, nothing propagates back to the host's, and each ``source`` appears at its
    ``target`` there."""
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    for source, target in binds:
        check(
            libc.mount(bytes(source), bytes(target), None, _MS_BIND, None),
            f"mount --bind {source} {target}",
        )
