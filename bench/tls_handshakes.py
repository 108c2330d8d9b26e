"""TLS handshakes/s through the HAProxy data plane (issue 21, "Figures"): full handshakes and
resumed ones, TLS 1.3 and 1.2, one and two clients at once, with ``openssl s_time``.

HAProxy runs (master-worker) with the edge's HTTPS frontend exactly as the data plane renders
it (``edge.extra_sections``: ``bind ... ssl crt <default> crt-list <list> alpn h2,http/1.1``),
through the test harness that the edge tests use; the certificate is the edge's default, a
P-256 key like the ACME ones (``platform/tls/pem.new_key``). Each connection fetches ``/``
(a 404 from HAProxy itself: the handshake is what is timed, not an app).

    .venv/bin/python -m bench.tls_handshakes [seconds]      # default 10 per case

``s_time`` is a single-threaded client: on a 2-core machine the client's half of each
handshake shares the cores with HAProxy, so these are lower bounds of what HAProxy can do.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from tests.ingress.haproxy.edge_harness import running_edge

from appdeck.ingress.haproxy import edge

COUNT = re.compile(rb"(\d+) connections in \d+ real seconds")
"""s_time's own wall time is whole seconds: the bench times the client itself instead."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def s_time(port: int, mode: str, version: str, seconds: int) -> tuple[int, float]:
    """Connections per second one ``openssl s_time`` client made (``mode``: -new/-reuse),
    over the client process's wall time (its start, well under 1 %, included)."""
    began = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "openssl",
        "s_time",
        "-connect",
        f"127.0.0.1:{port}",
        mode,
        version,
        "-www",
        "/",
        "-time",
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    async with asyncio.timeout(seconds * 3 + 30):
        out, _ = await proc.communicate()
    took = time.perf_counter() - began
    found = COUNT.findall(out)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"s_time {mode} {version} failed: {out[-500:]!r}")
    return int(found[-1]), took


async def main(seconds: int) -> None:
    def options(https: int, _app: str) -> edge.EdgeOptions:
        return edge.EdgeOptions(https_bind=f"127.0.0.1:{https}", https_port=https)

    with tempfile.TemporaryDirectory() as tmp:
        async with running_edge(Path(tmp), options, maps={"gate": "open 1\n"}) as run:
            print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores)")
            worker = await run.worker_pid()
            print(f"{'case':30s} {'1 client/s':>11s} {'2 clients/s':>12s} {'HAProxy CPU':>14s}")
            for version in ("-tls1_3", "-tls1_2"):
                for mode, what in (("-new", "full handshakes"), ("-reuse", "resumed")):
                    count, took = await s_time(run.https_port, mode, version, seconds)
                    cpu = cpu_seconds(worker)
                    both = await asyncio.gather(
                        *(s_time(run.https_port, mode, version, seconds) for _ in range(2))
                    )
                    per = (cpu_seconds(worker) - cpu) / sum(n for n, _ in both) * 1e6
                    rate = sum(n / t for n, t in both)
                    name = f"TLS {version[4:].replace('_', '.')} {what}"
                    print(f"{name:30s} {count / took:11.0f} {rate:12.0f} {per:9.0f} µs/conn")
            print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
