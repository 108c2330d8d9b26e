"""Write tests/slow.txt: the tests `make quick` leaves out (`make slow-list` runs this).

Reads the output of a quick run with ``--durations=0`` (standard input or a file) and prints,
sorted, the node ids whose setup, call and teardown took ``--at-least`` seconds together
(default 1.0): the tests that start processes (CLI calls, servers, HAProxy, apps in their
sandbox) or wait on purpose. ``make test`` runs them all the same.

    .venv/bin/python scripts/slow_tests.py quick-durations.log > tests/slow.txt
"""

from __future__ import annotations

import argparse
import collections
import re
import sys

LINE = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+(\S+::\S+)")
HEADER = (
    "# The tests `make quick` leaves out (marked `slow` by tests/conftest.py): each took {at}s\n"
    "# or more of a quick run. `make test` runs them. Made by `make slow-list`; do not edit.\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", type=argparse.FileType(), default=sys.stdin)
    parser.add_argument("--at-least", type=float, default=1.0)
    args = parser.parse_args()
    seconds: collections.Counter[str] = collections.Counter()
    for line in args.log:
        match = LINE.match(line)
        if match:
            seconds[match.group(2)] += float(match.group(1))
    slow = sorted(test for test, spent in seconds.items() if spent >= args.at_least)
    if not seconds:
        sys.exit("no durations found: run pytest with --durations=0")
    sys.stdout.write(HEADER.format(at=args.at_least) + "".join(f"{test}\n" for test in slow))


if __name__ == "__main__":
    main()
