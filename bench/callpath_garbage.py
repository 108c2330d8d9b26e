"""What a ``tools/call`` leaves for Python's cyclic collector (issue 26 §1): the server and
in-memory harness of ``callpath_cost.py``; first the objects that only the collector could
free, by type, over ``--sample`` calls (``gc.DEBUG_SAVEALL``), then the collector's passes and
their time over ``-n`` calls at the server's thresholds (``gc.callbacks``).

    .venv/bin/python bench/callpath_garbage.py [-n 20000] [--era 2026]

Everything a request makes should be freed by reference counting when it ends: a type listed
here is a reference cycle on the request path (``tests/transport/test_request_garbage.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import time
from typing import Any

import callpath_cost as cc


def cycles(loop: asyncio.AbstractEventLoop, poster: Any, bodies: list[bytes]) -> None:
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        loop.run_until_complete(cc.measure(poster, bodies))
        gc.collect()
        kinds = collections.Counter(
            f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    print(f"left for the collector: {sum(kinds.values()) / len(bodies):.1f} objects a call")
    for kind, count in kinds.most_common(12):
        print(f"  {count / len(bodies):6.2f}  {kind}")


def passes(loop: asyncio.AbstractEventLoop, poster: Any, bodies: list[bytes]) -> None:
    seen: collections.defaultdict[str, float] = collections.defaultdict(float)
    began = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        generation = info["generation"]
        seen[f"passes{generation}"] += 1
        seen[f"seconds{generation}"] += time.perf_counter() - began[0]
        seen[f"collected{generation}"] += info["collected"]

    gc.callbacks.append(callback)
    cpu = time.process_time()
    try:
        loop.run_until_complete(cc.measure(poster, bodies))
    finally:
        gc.callbacks.remove(callback)
    used = time.process_time() - cpu
    n = len(bodies)
    print(f"{n} calls, {used / n * 1e6:.1f} µs CPU each; thresholds {gc.get_threshold()}")
    for generation in (0, 1, 2):
        count = int(seen[f"passes{generation}"])
        print(
            f"  gen {generation}: {count} passes, {seen[f'seconds{generation}'] / n * 1e6:.2f} µs "
            f"a call, {int(seen[f'collected{generation}'])} objects collected"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="calls for the passes' count")
    parser.add_argument("--sample", type=int, default=200, help="calls for the cycles' types")
    parser.add_argument("--era", choices=["2025", "2026"], default="2025")
    args = parser.parse_args()
    loop, services, poster, bodies = cc.quiet_server(args.era)
    cycles(loop, poster, bodies[: args.sample])
    passes(loop, poster, bodies[args.sample : args.sample + args.n])
    loop.run_until_complete(services.stop(stop_apps=True))


if __name__ == "__main__":
    main()
