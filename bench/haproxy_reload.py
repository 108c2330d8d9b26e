"""What one reload of the HAProxy data plane costs (issue 26 §3/§4): ``--reloads`` changes of
the data plane's config (``render``) of ``--backends`` routes through ``HAProxyProcess.apply`` (write, reload through
the master socket, wait until the worker runs it), on a throwaway directory under /tmp.

Printed: the wall time a reload, the CPU of the processes the reload spawned and reaped
(``haproxy -c`` when it runs), and the CPU of HAProxy's master with the workers it reaped
(read from ``/proc/<master>/stat``: the master is a daemon, not our child).

    .venv/bin/python bench/haproxy_reload.py [--reloads 30] [--backends 50]

Before/after a change to ``src/``: ``PYTHONPATH=<other tree>/src`` in front, alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.haproxy.config import Layout, Rendered, render
from appdeck.ingress.haproxy.listening import free_port
from appdeck.ingress.haproxy.process import HAProxyProcess
from appdeck.ingress.routes import Backend, RouteTable

TICKS = os.sysconf("SC_CLK_TCK")


def rendered(layout: Layout, turn: int, port: int, backends: int) -> Rendered:
    """The data plane's own config (``render``) for ``backends`` routes of one instance each;
    the last route's upstream moves with ``turn``, so each turn is a new config to reload."""
    table = RouteTable()
    for i in range(backends):
        upstream = f"127.0.0.1:{20000 + i + (turn if i == backends - 1 else 0)}"
        table.set(f"app{i}", [Backend(f"r{i}", 100, [upstream])])
    return render(table, layout, host="127.0.0.1", port=port, proxy=ProxyConfig())


def master_cpu(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` (fields 14-17 of its stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:15]) / TICKS


async def main(reloads: int, backends: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="reload-bench-", dir="/tmp"))
    process, port = HAProxyProcess(Layout(directory)), free_port("127.0.0.1")
    try:
        async with process.locked():
            await process.apply(rendered(process.layout, 0, port, backends))
        pid = process.master_pid()
        assert pid is not None
        children, master = resource.getrusage(resource.RUSAGE_CHILDREN), master_cpu(pid)
        started = time.perf_counter()
        for turn in range(1, reloads + 1):
            async with process.locked():
                config = rendered(process.layout, turn, port, backends)
                assert await process.apply(config) == "reloaded"
        wall = (time.perf_counter() - started) / reloads
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spawned = (
            after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
        ) / reloads
        kept = (master_cpu(pid) - master) / reloads
        print(
            f"{reloads} reloads of {backends} backends: {wall * 1000:.1f} ms wall each; "
            f"spawned processes {spawned * 1000:.1f} ms CPU each; HAProxy's master and its "
            f"reaped workers {kept * 1000:.1f} ms CPU each; load {os.getloadavg()[0]:.2f}"
        )
    finally:
        await process.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reloads", type=int, default=30)
    parser.add_argument("--backends", type=int, default=50)
    options = parser.parse_args()
    asyncio.run(main(options.reloads, options.backends))
