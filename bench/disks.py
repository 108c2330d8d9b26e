"""What the app disks cost at start (issue 19, finding 4): ``runtime/disks.py``'s
:class:`AppDisks` on real loop devices, in a scratch directory.

    .venv/bin/python bench/disks.py [--apps 20] [--disk-mb 1024] [--rounds 3]

1. **First deploy of an app**: ``AppDisks.ensure(app, disk_mb)`` on a fresh directory: the
   sparse image (``ftruncate``), ``mkfs.ext4``, the loop mount, ``releases``/``data`` and the
   bind of ``data`` onto the app's SQLite directory; ``--apps`` apps, one after the other.
2. **Every later prepare/start**: ``ensure`` again while mounted (reads
   ``/proc/self/mountinfo``; nothing to do).
3. **Server start**: ``AppDisks.restore()`` for ``--apps`` apps after their mounts were lost
   (a reboot: every image mounted again), and again while all are mounted (a plain restart).
4. **App deletion**: ``remove`` (two unmounts, the image deleted).
0. **The start-up probe**: ``open_disks(..., "auto", sandboxed=True)``: a small image made,
   mounted, unmounted and deleted, once per server start.
5. **Growth**: ``ensure(app, 2 * disk_mb)`` (online ``resize2fs`` where the host allows it,
   else offline: unmount, ``e2fsck -f``, ``resize2fs``, mount).

Medians (and max) over ``--rounds`` rounds, in milliseconds. Needs root and loop devices.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from appdeck.runtime.disks import AppDisks, loop_available, open_disks, unmount_under


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _unmount_all(root: Path) -> None:
    unmount_under(f"{root}/")


def one_round(apps: int, disk_mb: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {
        "create": [],
        "ensure_mounted": [],
        "remove": [],
        "grow": [],
        "probe": [],
    }
    with tempfile.TemporaryDirectory(prefix="appdeck-disks-") as scratch:
        root = Path(scratch)
        disks = AppDisks(root / "disks", mode="loop", default_mb=disk_mb, appdb=root / "appdb")
        try:
            probe = root / "probe"
            figures["probe"].append(
                _timed(lambda: open_disks(probe, "auto", default_mb=disk_mb, sandboxed=True))
            )
            for app in range(1, apps + 1):
                figures["create"].append(_timed(lambda a=app: disks.ensure(a, disk_mb)))
            for app in range(1, apps + 1):
                figures["ensure_mounted"].append(_timed(lambda a=app: disks.ensure(a, disk_mb)))
            _unmount_all(root)  # a reboot
            figures["restore_after_reboot"] = [_timed(disks.restore)]
            figures["restore_mounted"] = [_timed(disks.restore)]
            figures["grow"].append(_timed(lambda: disks.ensure(1, 2 * disk_mb)))
            for app in range(1, apps + 1):
                figures["remove"].append(_timed(lambda a=app: disks.remove(a)))
        finally:
            _unmount_all(root)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--apps", type=int, default=20)
    parser.add_argument("--disk-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    why = loop_available()
    if why is not None:
        print(f"cannot measure: {why}", file=sys.stderr)
        return 1
    rounds = [one_round(args.apps, args.disk_mb) for _ in range(args.rounds)]
    report: dict[str, dict[str, float]] = {}
    for name in rounds[0]:
        values = [value for figures in rounds for value in figures[name]]
        report[name] = {
            "median_ms": round(statistics.median(values), 1),
            "max_ms": round(max(values), 1),
            "n": len(values),
        }
    report["host"] = {"load_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
