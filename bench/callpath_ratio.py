"""AppDeck's ``tools/call`` against the reference's, in memory, alternated (issue 26 §1).

``bench/run.py`` measures the ratio over sockets, with a load generator on the other core; on
this shared VM one server's rounds spread by 10-25 % and the two sides drift apart within a run
(the same SDK server measured twice in one run: 2,589 and 2,064 req/s). This script takes the
socket and the load generator away and pairs the rounds: each round runs
``callpath_cost.py`` once for AppDeck (bearer auth, session, audit, rate limit: the production
path) and once for the reference (``--server sdk``), one after the other, each a fresh process
warmed up the same way, and reports the ratio of their CPU per call round by round and the
median of those ratios. The CPU counted is the whole process's (AppDeck's audit writer thread
included) over the measured calls only.

    .venv/bin/python bench/callpath_ratio.py [--rounds 7] [-n 3000] [--era 2026]

With ``--era 2026`` AppDeck is sent the 2026-07-28 requests; the reference is the same SDK
server either way (as in ``bench/run.py``, where SDK-2026 is the same server).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PER_CALL = re.compile(r"tools/call, ([0-9.]+) µs CPU each")


def per_call(arguments: list[str], cpu: int | None, env: dict[str, str] | None = None) -> float:
    """CPU µs per call of one ``callpath_cost.py`` run, on core ``cpu`` when given (as
    ``bench/run.py`` pins its servers: AppDeck's threads share that core), in ``env``."""
    pin = ["taskset", "-c", str(cpu)] if cpu is not None and shutil.which("taskset") else []
    done = subprocess.run(
        [*pin, sys.executable, str(BENCH / "callpath_cost.py"), *arguments],
        capture_output=True,
        text=True,
        cwd=BENCH,
        env=env,
        timeout=600,
        check=False,
    )
    found = PER_CALL.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callpath_cost.py {' '.join(arguments)} failed:\n{done.stderr[-3000:]}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("-n", type=int, default=3000, help="AppDeck's measured calls a round")
    parser.add_argument("--era", choices=["2025", "2026"], default="2025")
    parser.add_argument("--cpu", type=int, default=0, help="the core both run on; -1: unpinned")
    args = parser.parse_args()
    cpu = None if args.cpu < 0 else args.cpu
    sdk_calls = max(200, args.n // 5)  # the reference is ~5x slower: about as long a run
    ratios: list[float] = []
    print(f"{'round':>5} {'AppDeck µs':>11} {'SDK µs':>9} {'ratio':>7}")
    for index in range(args.rounds):
        # the order alternates too: neither side always runs on a cooler or warmer machine
        if index % 2 == 0:
            ours = per_call(["-n", str(args.n), "--era", args.era], cpu)
            theirs = per_call(["--server", "sdk", "-n", str(sdk_calls)], cpu)
        else:
            theirs = per_call(["--server", "sdk", "-n", str(sdk_calls)], cpu)
            ours = per_call(["-n", str(args.n), "--era", args.era], cpu)
        ratios.append(theirs / ours)
        print(f"{index + 1:>5} {ours:>11.1f} {theirs:>9.1f} {ratios[-1]:>6.2f}x", flush=True)
    spread = f"{min(ratios):.2f}x - {max(ratios):.2f}x"
    print(
        f"tools/call ({args.era}), AppDeck/SDK CPU per call, in memory: median "
        f"{statistics.median(ratios):.2f}x over {args.rounds} paired rounds ({spread})"
    )


if __name__ == "__main__":
    main()
