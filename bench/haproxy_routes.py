"""Route change to effect through the HAProxy data plane (issue 21): the time from a route
table write to HAProxy running it, read back (``HAProxyDataPlane.synced``), for a weight
change (runtime API, no reload) and a new backend (a master-worker reload), and how long a
killed HAProxy takes to serve its routes again (kill -9 of master and worker → the
watchdog's restart → a 200).

    .venv/bin/python bench/haproxy_routes.py --changes 50 --kills 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from appdeck.ingress.haproxy.config import Layout
from appdeck.ingress.haproxy.plane import HAProxyCounters, HAProxyDataPlane, HAProxyTable
from appdeck.ingress.routes import Backend


async def _hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
    writer.close()


def _summary(name: str, seconds: list[float]) -> None:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    print(
        f"{name:28s} n={len(ms):3d}  p50 {statistics.median(ms):7.1f} ms  "
        f"p99 {p99:7.1f} ms  max {ms[-1]:7.1f} ms"
    )


async def main(changes: int, kills: int) -> None:
    server = await asyncio.start_server(_hello, "127.0.0.1", 0)
    upstream = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    table = HAProxyTable()
    plane = HAProxyDataPlane(
        table, HAProxyCounters(), Layout(Path(tempfile.mkdtemp(prefix="hxr"))), port=0
    )
    table.set("blog", [Backend("r1", 90, [upstream]), Backend("r2", 10, ["127.0.0.1:9"])])
    await plane.start()
    plane.settle()
    try:
        weights, reloads, restores = [], [], []
        for i in range(changes):
            started = time.perf_counter()
            share = 10 + i % 2 * 40  # a canary step: 10 %, 50 %, 10 %, ...
            table.set(
                "blog",
                [Backend("r1", 100 - share, [upstream]), Backend("r2", share, ["127.0.0.1:9"])],
            )
            assert await plane.synced()
            weights.append(time.perf_counter() - started)
        for i in range(changes):
            started = time.perf_counter()
            table.set(f"app{i}", [Backend("r1", 100, [upstream])])
            assert await plane.synced()
            reloads.append(time.perf_counter() - started)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{plane.port}") as client:
            for _ in range(kills):
                pid = plane.process.master_pid()
                proc = await plane.process.master.raw("show proc")
                victims = [int(x.split()[0]) for x in proc.splitlines() if " worker " in x]
                for victim in [p for p in (pid, *victims) if p is not None]:
                    with contextlib.suppress(ProcessLookupError, TypeError):
                        os.kill(victim, signal.SIGKILL)
                killed = time.perf_counter()
                async with asyncio.timeout(30):
                    while True:
                        with contextlib.suppress(httpx.HTTPError):
                            r = await client.get("/", headers={"host": "app0.localhost"})
                            if r.status_code == 200 and plane.process.master_pid() != pid:
                                break
                        await asyncio.sleep(0.005)
                restores.append(time.perf_counter() - killed)
                await asyncio.sleep(1)
        _summary("weight change (runtime API)", weights)
        _summary("new route (reload)", reloads)
        _summary("kill -9 -> routes back", restores)
    finally:
        await plane.stop(haproxy=True)
        shutil.rmtree(plane.layout.directory, ignore_errors=True)
        server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.changes, args.kills))
