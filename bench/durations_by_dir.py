"""Sums a pytest ``--durations=0`` report by directory (or module) and phase (issue 26 §3):
where a test run's worker time goes, set-up / call / teardown.

    .venv/bin/python -m pytest -q --durations=0 ... > run.txt
    .venv/bin/python bench/durations_by_dir.py run.txt [--by module] [--depth 2]
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

LINE = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+?)::")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--by", choices=["dir", "module"], default="dir")
    parser.add_argument("--depth", type=int, default=2, help="directory levels (tests/e2e: 2)")
    args = parser.parse_args()
    sums: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in args.report.read_text(errors="replace").splitlines():
        found = LINE.match(line)
        if not found:
            continue
        seconds, phase, path = float(found[1]), found[2], found[3]
        parts = path.split("/")
        key = path if args.by == "module" else "/".join(parts[: min(args.depth, len(parts) - 1)])
        sums[key][phase] += seconds
        sums["(all)"][phase] += seconds
    print(f"{'where':60} {'sum':>9} {'setup':>9} {'call':>9} {'teardown':>9}")
    for key, phases in sorted(sums.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(phases.values())
        print(
            f"{key:60} {total:9.1f} {phases['setup']:9.1f} {phases['call']:9.1f}"
            f" {phases['teardown']:9.1f}"
        )


if __name__ == "__main__":
    main()
