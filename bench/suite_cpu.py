"""Where a test run's CPU goes, by kind of process (issue 26 §3): runs a command (by default
the suite as ``make unit`` runs it) and samples ``/proc`` every half second, adding each
process's CPU (user + system) to its kind: the xdist workers (in-process tests), ``appdeck
serve`` and the other ``appdeck`` commands the tests start, HAProxy, PostgreSQL, Chromium, and
so on. Every process of the machine is sampled, not only the command's: run it on an otherwise
quiet machine. A process that lives less than a sample (bwrap, git, a short python) is missed: the
machine's own total (``/proc/stat``) is printed beside what was attributed.

    .venv/bin/python bench/suite_cpu.py                     # the whole suite, -n 4 loadfile
    .venv/bin/python bench/suite_cpu.py -- .venv/bin/pytest -q tests/cli
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
DEFAULT = [sys.executable, "-m", "pytest", "-q", "-n", "4", "--dist", "loadfile"]


def kind(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return "?"
    cmd = raw.decode(errors="replace")
    if " -m appdeck " in cmd or "bin/appdeck " in cmd:
        return "appdeck " + cmd.split("appdeck ", 1)[1].split(" ", 1)[0]
    if "-c import sys;exec(eval(sys.stdin" in cmd:
        return "pytest worker (in-process tests)"
    for mark, name in (
        ("pytest", "pytest (controller)"),
        ("haproxy", "haproxy"),
        ("postgres", "postgres"),
        ("redis", "redis"),
        ("chrom", "chromium"),
        ("node", "node (conformance, npm)"),
        ("bwrap", "bwrap"),
        ("app.py", "apps (app.py)"),
    ):
        if mark in cmd:
            return name
    if "python" in cmd:
        return "python, other"
    return cmd.split(" ", 1)[0][:40] or "kernel threads"


def machine_cpu() -> float:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:4]
    return sum(int(x) for x in fields) / TICKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="*", help="what to run (after --)")
    parser.add_argument("--every", type=float, default=0.5)
    args = parser.parse_args()
    command = args.command or DEFAULT
    last: dict[tuple[int, str], float] = {}
    names: dict[tuple[int, str], tuple[str, str]] = {}
    spent: collections.Counter[str] = collections.Counter()
    first = True
    started, machine0 = time.monotonic(), machine_cpu()
    child = subprocess.Popen(command)
    while True:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                raw = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            comm = raw[raw.find("(") + 1 : raw.rfind(")")]
            fields = raw.rsplit(")", 1)[1].split()
            key = (int(entry), fields[19])  # pid and start time: one process
            cpu = (int(fields[11]) + int(fields[12])) / TICKS
            if names.get(key, ("", ""))[0] != comm:  # new, or exec'd since
                names[key] = (comm, kind(int(entry)))
            if not first and cpu > last.get(key, 0.0):
                spent[names[key][1]] += cpu - last.get(key, 0.0)
            last[key] = cpu
        first = False
        if child.poll() is not None:
            break
        time.sleep(args.every)
    wall, machine = time.monotonic() - started, machine_cpu() - machine0
    print(f"exit {child.returncode}; wall {wall:.0f} s; machine CPU {machine:.0f} s")
    print(f"attributed {sum(spent.values()):.0f} s (processes seen by a sample):")
    for name, seconds in spent.most_common(25):
        print(f"{seconds:8.1f} s  {name}")
    raise SystemExit(child.returncode)


if __name__ == "__main__":
    main()
