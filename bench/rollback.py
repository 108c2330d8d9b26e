"""Warm rollbacks only (issue 26 §4: ≤ 10 ms), more of them than ``bench/deploy.py`` runs,
with the CPU this process spent on each beside its wall time.

    .venv/bin/python bench/rollback.py [--rounds 20] [--sandbox on|off]

``bench/deploy.py``'s platform (in-process, as ``appdeck serve`` runs it; hello, 2
instances, sandboxed by default). Each round deploys blue/green (the release it replaces
stays warm), then times the rollback to it as ``bench/deploy.py`` does: from the façade's
check (``apps.load``) to the answer, traffic moved (HAProxy runs it). ``cpu`` is
``time.process_time()`` over the same span: this process's threads (the loop, SQLite's),
not HAProxy's; on a loaded machine it moves less than the wall time. Between rounds the
platform rests 0.3 s, so that the stop of the release that lost traffic (aside) is done.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import time

import deploy


async def measure(mode: str, rounds: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of each warm rollback."""
    deploy.use_system_python()
    platform = await deploy._open(mode)
    walls: list[float] = []
    cpus: list[float] = []
    try:
        services = platform.services.platform
        assert services is not None
        for _ in range(rounds):
            await deploy._deploy(platform, "blue_green")
            await asyncio.sleep(0.3)
            cpu, begin = time.process_time(), time.perf_counter()
            app = (await services.apps.load(platform.who, platform.app_id, "deploy.write")).app
            record = await services.deploys.rollback(app)
            walls.append(time.perf_counter() - begin)
            cpus.append(time.process_time() - cpu)
            assert record.state == "live", record.status_message
            await asyncio.sleep(0.3)
    finally:
        await platform.services.stop(stop_apps=True)
        shutil.rmtree(platform.work, ignore_errors=True)  # its data dir holds a uid slot
    return walls, cpus


def _line(name: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return (
        f"  {name:4s} p50 {statistics.median(ms):6.1f} ms  p90 {p90:6.1f}  min {ms[0]:6.1f}"
        f"  (all: {', '.join(f'{v * 1000:.1f}' for v in values)})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--sandbox", choices=["on", "off"], default="on")
    args = parser.parse_args()
    walls, cpus = asyncio.run(measure(args.sandbox, args.rounds))
    print(f"warm rollback, sandbox {args.sandbox}, {args.rounds} rounds:")
    print(_line("wall", walls))
    print(_line("cpu", cpus))
