"""How many ``appdeck`` processes a test run starts (issue 26 §3): what one second of a
process's start is worth to ``make test``. Polls ``/proc`` (every 0.05 s) while the process
``--pid`` (the pytest run) lives and counts each new process whose command line runs this
tree's ``appdeck`` (the venv's script, or ``python -m appdeck``), by its first word after it
(``serve``, ``admin``, ...). A process that lives less than one poll can be missed: the count is
a floor. No test is changed for it.

    .venv/bin/python bench/count_appdeck_processes.py --pid <pytest's pid> [--tree <dir>]
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from pathlib import Path


def command_of(pid: str, tree: str) -> str | None:
    """The appdeck subcommand process ``pid`` runs, or None when it is no appdeck of ``tree``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [a.decode(errors="replace") for a in argv if a]
    for i, word in enumerate(words):
        script = word.endswith("/bin/appdeck") and word.startswith(tree)
        module = word == "appdeck" and i > 0 and words[i - 1] == "-m"
        if script or (module and words[0].startswith(tree)):
            rest = [w for w in words[i + 1 :] if not w.startswith("-")]
            return rest[0] if rest else "(none)"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
    args = parser.parse_args()
    seen: set[tuple[str, str]] = set()  # (pid, start time): pids are reused
    counts: collections.Counter[str] = collections.Counter()
    while Path(f"/proc/{args.pid}").exists():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                start = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
            except (OSError, IndexError):
                continue
            if (pid, start) in seen:
                continue
            seen.add((pid, start))
            command = command_of(pid, args.tree)
            if command is not None:
                counts[command] += 1
        time.sleep(0.05)
    print(f"appdeck processes started: {sum(counts.values())}", dict(counts.most_common()))


if __name__ == "__main__":
    main()
