"""A finished test's installs give their uid ranges back.

Each server a test starts on a fresh data dir claims a uid range in the host's registry
(``appdeck.runtime.install``), and a range stays held while its data dir still names the
install, running or not: an operator's stopped install may still have apps on those uids.
pytest keeps a test's ``tmp_path``, so every install the suite made held its range, and the
registry grew by ~1,000 entries a run: a new install's scan for the lowest free range read
two files per entry (~35 % of an in-process ``Services.start`` late in a run).

Once a test is over, its data dirs are garbage: their ``install.json`` is removed when no
process holds the range (a shared lock on the slot: a server still running keeps its own).
The next claim then takes that range over, and removes its runtime dir and empty cgroups.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from appdeck.runtime.install import INSTALL_FILE, REGISTRY, UID_COUNT

PATTERNS = (INSTALL_FILE, f"*/{INSTALL_FILE}", f"*/*/{INSTALL_FILE}", f"*/*/*/{INSTALL_FILE}")
"""Where a test's data dirs keep their install record (up to three levels down)."""


def release_installs_under(root: Path, registry: Path = REGISTRY) -> int:
    """Forget the installs of the data dirs under ``root`` that nothing runs on: how many."""
    released = 0
    for pattern in PATTERNS:
        for record in root.glob(pattern):
            try:
                base = json.loads(record.read_text()).get("uid_base")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(base, int) and _unheld(registry / f"{base // UID_COUNT}.lock"):
                with contextlib.suppress(OSError):
                    record.unlink()
                    released += 1
    return released


def _unheld(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return True  # no lock file: nobody ever held it here
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # a process (a server, a leaked one) still holds the range
    finally:
        os.close(fd)  # closing drops the lock taken
    return True
