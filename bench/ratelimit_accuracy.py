"""How exact the shared rate limit is across three replicas, with and without leases (issue 26).

Three :class:`RedisRateLimiter` instances, each on its own Redis connection pool (three
replicas, in one process: the limiter's accounting is what is measured, not a server), share
one bucket per case on a real Redis (a fresh key prefix, deleted afterwards). A client calls
at a fixed rate, every call on a random replica, in ticks of ``--tick`` seconds (the calls of a
tick concurrently). Cases, interleaved in one run:

- ``no lease``: one Redis round trip per check (``lease_seconds = 0``), the limiter before
  issue 26;
- ``lease``: the default lease (``APPDECK_RATE_LIMIT_LEASE_SECONDS``, 0.1 s).

Shapes (``--rate``/``--burst``, 50/s and 200 by default, as ``appdeck serve``):

- ``over``: the client calls at 3x the rate for ``--seconds``: the bucket empties after its
  burst and every refill is taken. The promise: the grants up to any moment ``t`` after the
  first call stay within ``burst + rate x t`` (+ ``3 x C`` with leases). Reported: grants in
  all, the most over that line at any moment (over-grant) and how far under it the total ends
  (under-grant: refused while tokens were held elsewhere or lost), in tokens.
- ``under``: the burst is spent first (not counted), then the client calls at 0.9x the rate:
  the refill alone must carry it, nothing should be refused (what is, is refused early); the
  line is then ``rate x t``.

Also: Redis round trips per call, and this process's CPU per call (``time.process_time``;
the client's own work is in both cases alike).

    .venv/bin/python bench/ratelimit_accuracy.py           # ~1 minute
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from appdeck.auth.ratelimit import LEASE_SECONDS, RedisRateLimiter

REPLICAS = 3


class CountingRedis(Redis):
    """Counts the commands sent (round trips)."""

    sent = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent += 1
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


async def one_case(
    args: argparse.Namespace, lease_seconds: float, calls_per_second: float, drain: bool
) -> dict[str, Any]:
    prefix = f"benchrl{uuid.uuid4().hex[:8]}"
    clients = [CountingRedis.from_url(args.redis) for _ in range(REPLICAS)]
    replicas = [
        RedisRateLimiter(c, prefix, args.rate, args.burst, lease_seconds=lease_seconds)
        for c in clients
    ]
    rng = random.Random(13)
    for client in clients:
        await client.ping()
    if drain:  # the burst spent first (not counted): the calls below run on the refill alone
        for i in range(args.burst):
            await replicas[i % REPLICAS].take("k")
    for client in clients:
        client.sent = 0
    grants: list[float] = []
    refused = 0
    calls = 0
    cpu = time.process_time()
    start = time.monotonic()
    due = 0.0
    while (now := time.monotonic() - start) < args.seconds:
        n = int((now + args.tick) * calls_per_second) - int(due * calls_per_second)
        due = now + args.tick
        answers = await asyncio.gather(
            *(replicas[rng.randrange(REPLICAS)].take("k") for _ in range(n))
        )
        at = time.monotonic() - start
        calls += n
        refused += sum(a is not None for a in answers)
        grants += [at] * sum(a is None for a in answers)
        await asyncio.sleep(max(0.0, due - (time.monotonic() - start)))
    wall = time.monotonic() - start
    cpu = time.process_time() - cpu
    sent = sum(c.sent for c in clients)
    held = sum(r.held("k") for r in replicas)
    # the line: burst + rate x t, t from the first call (the bucket was full then)
    burst = 0 if drain else args.burst
    over = max((i + 1) - (burst + args.rate * t) for i, t in enumerate(grants))
    under = burst + args.rate * wall - len(grants)
    keys = [k async for k in clients[0].scan_iter(match=f"{prefix}:*")]
    if keys:
        await clients[0].delete(*keys)
    for client in clients:
        await client.aclose()
    return {
        "lease_seconds": lease_seconds,
        "lease_cap": replicas[0].lease_cap,
        "calls_per_second": calls_per_second,
        "calls": calls,
        "granted": len(grants),
        "refused": refused,
        "seconds": wall,
        "line_at_end": burst + args.rate * wall,
        "most_over_the_line": over,
        "under_the_line_at_end": under,
        "held_at_end": held,
        "round_trips_per_call": sent / max(1, calls),
        "cpu_us_per_call": cpu / max(1, calls) * 1e6,
    }


async def main(args: argparse.Namespace) -> None:
    cases = [("no lease", 0.0), ("lease", LEASE_SECONDS)]
    shapes = [("over", 3.0, False), ("under", 0.9, True)]
    results: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for shape, factor, drain in shapes:
            order = cases if round_ % 2 == 0 else cases[::-1]
            for label, lease in order:
                r = await one_case(args, lease, args.rate * factor, drain)
                results.setdefault(f"{shape} / {label}", []).append(r)
    print(f"load average at end: {os.getloadavg()}")
    print(
        "| shape / limiter | C | calls | granted | refused | burst + rate x t at end | "
        "most over the line | under the line at end | round trips per call | CPU µs per call |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, runs in results.items():
        for r in runs:
            print(
                f"| {label} | {r['lease_cap']} | {r['calls']} | {r['granted']} | {r['refused']} | "
                f"{r['line_at_end']:.1f} | {r['most_over_the_line']:+.1f} | "
                f"{r['under_the_line_at_end']:.1f} | {r['round_trips_per_call']:.3f} | "
                f"{r['cpu_us_per_call']:.0f} |"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=8.0, help="per case")
    parser.add_argument("--tick", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / ".work" / "ratelimit_accuracy.json"
    )
    return parser.parse_args()


if __name__ == "__main__":
    print(f"load average at start: {os.getloadavg()}")
    asyncio.run(main(parse_args()))
