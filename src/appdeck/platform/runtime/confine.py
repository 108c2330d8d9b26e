"""What a sandboxed instance's shim sets up before it starts the app (see :mod:`.shim`):
membership of the instance's cgroups, a network namespace of its own when the driver did not
hand it one, and the OOM-kill count it reports the app's end by.

Stdlib-only, like the shim, which loads it by path (``python -I -S`` runs it outside the
package).
"""

from __future__ import annotations

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
    ) -> None:
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
    """``appdeck.platform.netns``, loaded by path (this file runs outside the package)."""
    path = Path(__file__).resolve().parent.parent / "netns.py"
    spec = importlib.util.spec_from_file_location("appdeck_netns", path)
    if spec is None or spec.loader is None:
        raise OSError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
