"""Where a server spends its CPU under the benchmark load: py-spy, aggregated per function.

Starts one server from ``run.py`` (pinned like the benchmark), opens a session, and drives one
method with wrk: first 5 s to measure the CPU time per request of each server thread (from
/proc), then ``--seconds`` while ``py-spy record --gil`` samples the server (only the thread
holding the GIL, so blocked threads and idle waits do not count). Prints the per-thread cost
and the top functions by self time and by inclusive time. py-spy is not a project dependency:
install it anywhere (``python -m venv /tmp/spy && /tmp/spy/bin/pip install py-spy``) and pass
``--py-spy /tmp/spy/bin/py-spy``.

    .venv/bin/python bench/pyspy_profile.py --server AppDeck --method tools/call \
        --py-spy /tmp/spy/bin/py-spy
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import run


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) per thread of ``pid``, keyed ``tid:name``."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        out[f"{task.name}:{name}"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def aggregate(raw: Path, top: int) -> list[str]:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f]
        total += n
        own[frames[-1]] += n
        for frame in set(frames[1:]):
            incl[frame] += n
    out = [f"{total} samples (GIL held)", "", "self:"]
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    out += ["", "inclusive:"]
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in incl.most_common(top * 2)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", choices=list(run.SERVERS), default="AppDeck")
    parser.add_argument("--method", choices=list(run.BODIES), default="tools/call")
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--py-spy", default="py-spy")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="raw py-spy output file")
    parser.add_argument("--nice", type=int, default=0, help="as in run.py")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.client_cpu})
    run.NICE = args.nice
    out = args.out or run.WORK / f"profile-{args.server.lower()}-{args.method.replace('/', '-')}"
    server = run.ServerProc(args.server, args.server_cpu)
    server.start()
    try:
        with httpx.Client(timeout=10) as client:
            session = run.open_session(client, server)
            run.verify(client, server, session, args.method)
        run.run_load("wrk", server, session, args.method, 2, args)  # warm-up
        assert server.proc is not None
        pid = server.proc.pid
        before = thread_cpu(pid)
        timed = run.run_load("wrk", server, session, args.method, 5, args)
        after = thread_cpu(pid)
        per_thread = {
            k: (after[k] - before.get(k, 0.0)) / timed.requests * 1e6
            for k in after
            if after[k] > before.get(k, 0.0)
        }
        load = threading.Thread(
            target=run.run_load,
            args=("wrk", server, session, args.method, args.seconds + 2, args),
        )
        load.start()
        spy = [args.py_spy, "record", "--gil", "-r", str(args.rate), "-d", str(args.seconds)]
        spy += ["-f", "raw", "-o", str(out), "--pid", str(server.proc.pid)]
        done = subprocess.run(spy, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"py-spy failed: {done.stderr or done.stdout}")
        load.join()
    finally:
        server.stop()
    print(f"{args.server} {args.method}: {timed.rps:,.0f} req/s over 5 s; CPU per request:")
    for name, us in sorted(per_thread.items(), key=lambda kv: -kv[1]):
        print(f"  thread {name}: {us:.1f} µs")
    print(f"  total: {sum(per_thread.values()):.1f} µs")
    print(f"\npy-spy raw output: {out}")
    print("\n".join(aggregate(out, args.top)))


if __name__ == "__main__":
    sys.exit(main())
