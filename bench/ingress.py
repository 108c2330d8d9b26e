"""Ingress overhead: req/s and latency of a tiny app, direct vs through the ingress router.

Cases (each a fresh set of processes, run in interleaved rounds; the median round counts):

- ``direct``: wrk → the app (a raw-ASGI "Hello, world!" on uvicorn + httptools + uvloop);
- ``haproxy``: wrk → HAProxy as the data plane drives it (issue 21, one thread) → the app;
- ``httpx``: wrk → a minimal ASGI proxy built on ``httpx.AsyncClient`` (streaming, pooled) →
  the app: a generic Python proxy, for scale. (The in-process Python ingress, once a case
  here, was removed with issue 21; its last figures are in RESULTS.md.)

Placement (two cores): the app *and* the proxy are pinned to CPU 0, wrk to CPU 1, and the
direct case uses the same placement (the app alone on CPU 0). The proxied figures therefore
carry the full CPU cost of the extra hop on the server core, as on a one-core host; the
ingress's own CPU time per request is reported separately (from /proc), which is the cost
that matters when the app runs elsewhere.

    .venv/bin/python bench/ingress.py --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
HOST = "127.0.0.1"
APP = "hello"
BODY = b"Hello, world!"

WRK_LUA = r"""
wrk.headers["Host"] = "%(host)s"
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%%d,"duration_us":%%d,"connect":%%d,"read":%%d,"write":%%d,'
    .. '"status":%%d,"timeout":%%d,"p50_us":%%f,"p90_us":%%f,"p99_us":%%f,"max_us":%%f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


# -- the servers (run as child processes of this script) ------------------------------------


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"13")],
        }
    )
    await send({"type": "http.response.body", "body": BODY})


class HttpxProxy:
    """The baseline: a streaming reverse proxy on httpx.AsyncClient, nothing else."""

    HOP = frozenset(
        {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
    )

    def __init__(self, upstream: str) -> None:
        import httpx

        try:
            import sniffio  # noqa: F401
        except ImportError:
            # httpcore imports sniffio on every request; without it installed (anyio 4.16
            # no longer pulls it in) each request pays four failed imports (~0.5 ms here).
            # A stand-in keeps the baseline about httpx, not about that.
            import types

            shim = types.ModuleType("sniffio")
            shim.current_async_library = lambda: "asyncio"  # type: ignore[attr-defined]
            sys.modules["sniffio"] = shim

        self.client = httpx.AsyncClient(
            base_url=f"http://{upstream}",
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
            timeout=httpx.Timeout(30.0, connect=2.0),
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        target = scope["raw_path"] + (
            b"?" + scope["query_string"] if scope["query_string"] else b""
        )
        headers = [(k, v) for k, v in scope["headers"] if k not in self.HOP]
        request = self.client.build_request(
            scope["method"], target.decode("latin-1"), headers=headers, content=body
        )
        response = await self.client.send(request, stream=True)
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (k.lower(), v) for k, v in response.headers.raw if k.lower() not in self.HOP
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


def listen(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(2048)
    return sock


async def serve(kind: str, port: int, upstream_port: int) -> None:
    import uvicorn

    from appdeck.tuning import tune_gc

    if kind == "haproxy":
        await serve_haproxy(port, upstream_port)
        return
    app: Any = hello if kind == "upstream" else HttpxProxy(f"{HOST}:{upstream_port}")
    config = uvicorn.Config(
        app,
        http="httptools",
        lifespan="off",
        access_log=False,
        log_config=None,
        server_header=False,
    )
    tune_gc()
    await uvicorn.Server(config).serve(sockets=[listen(port)])


async def serve_haproxy(port: int, upstream_port: int) -> None:
    """The HAProxy data plane (issue 21): HAProxy inherits this process's CPU pinning (one
    thread); stopped with it on SIGTERM."""
    import signal

    from appdeck.ingress import Backend
    from appdeck.ingress.haproxy.config import Layout
    from appdeck.ingress.haproxy.plane import HAProxyCounters, HAProxyDataPlane, HAProxyTable

    table = HAProxyTable()
    plane = HAProxyDataPlane(
        table, HAProxyCounters(), Layout(Path(tempfile.mkdtemp(prefix=f"hxb{port}-"))), port=port
    )
    table.set(APP, [Backend("r1", 100, [f"{HOST}:{upstream_port}"])])
    await plane.start()
    plane.settle()
    await plane.synced()
    done = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
    try:
        await done.wait()
    finally:
        await plane.stop(haproxy=True)
        shutil.rmtree(plane.layout.directory, ignore_errors=True)


# -- the driver -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def pinned(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") else []


def start(
    kind: str, port: int, upstream_port: int, cpu: int, logs: Path
) -> subprocess.Popen[bytes]:
    log = (logs / f"{kind}-{port}.log").open("wb")
    proc = subprocess.Popen(
        [
            *pinned(cpu),
            sys.executable,
            __file__,
            *("--serve", kind, "--port", str(port), "--upstream-port", str(upstream_port)),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{kind} exited early; see {log.name}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
            return proc
        time.sleep(0.05)
    proc.kill()
    sys.exit(f"{kind} did not start listening on {port}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def haproxy_seconds(port: int) -> float:
    """CPU seconds of the HAProxy processes the ``haproxy`` case on ``port`` runs (its files
    are in ``/tmp/hxb<port>-*``)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if entry.name.isdigit() and f"/hxb{port}-".encode() in (entry / "cmdline").read_bytes():
                total += cpu_seconds(int(entry.name))
    return total


def wrk(port: int, seconds: int, connections: int, script: Path, cpu: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            *pinned(cpu),
            *("wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script)),
            f"http://{HOST}:{port}/",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("BENCHJSON "))
    result: dict[str, Any] = json.loads(line.split(" ", 1)[1])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    result["errors"] = sum(result[k] for k in ("connect", "read", "write", "status", "timeout"))
    return result


def check(port: int) -> None:
    """One request by hand: the route must answer the app's body."""
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(f"GET / HTTP/1.1\r\nHost: {APP}.localhost:{port}\r\n\r\n".encode())
        data = b""
        while BODY not in data and len(data) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    if not data.startswith(b"HTTP/1.1 200") or BODY not in data:
        sys.exit(f"unexpected answer on port {port}: {data[:200]!r}")


def run_case(case: str, args: argparse.Namespace, script: Path, logs: Path) -> dict[str, Any]:
    upstream_port = free_port()
    procs = [start("upstream", upstream_port, 0, args.server_cpu, logs)]
    try:
        port = upstream_port
        if case != "direct":
            port = free_port()
            procs.append(start(case, port, upstream_port, args.server_cpu, logs))
        check(port)
        wrk(port, 2, args.connections, script, args.client_cpu)  # warm-up
        before = [cpu_seconds(p.pid) for p in procs]
        proxied = haproxy_seconds(port) if case == "haproxy" else 0.0
        result = wrk(port, args.seconds, args.connections, script, args.client_cpu)
        used = [cpu_seconds(p.pid) - b for p, b in zip(procs, before, strict=True)]
        if case == "haproxy":  # HAProxy's own processes, beside the driver's
            used[1] += haproxy_seconds(port) - proxied
        result["app_cpu_us"] = used[0] / result["requests"] * 1e6
        result["proxy_cpu_us"] = used[1] / result["requests"] * 1e6 if len(used) > 1 else 0.0
        return result
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--cases", default="direct,haproxy,httpx")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--serve", choices=["upstream", "httpx", "haproxy"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--upstream-port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        import uvloop

        with contextlib.suppress(KeyboardInterrupt):
            uvloop.run(serve(args.serve, args.port, args.upstream_port))
        return

    if shutil.which("wrk") is None:
        if shutil.which("apt-get") and os.geteuid() == 0:
            subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=False)
        if shutil.which("wrk") is None:
            sys.exit("wrk is required: apt-get install -y wrk")
    cases = args.cases.split(",")
    work = Path(tempfile.mkdtemp(prefix="appdeck-bench-ingress-"))
    script = work / "host.lua"
    script.write_text(WRK_LUA % {"host": f"{APP}.localhost"})
    print(
        f"{args.connections} connections, {args.seconds} s x {args.rounds} rounds; app and proxy "
        f"on CPU {args.server_cpu}, wrk on CPU {args.client_cpu}; logs in {work}",
        flush=True,
    )
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    for round_no in range(1, args.rounds + 1):
        for case in cases:
            r = run_case(case, args, script, work)
            results[case].append(r)
            print(
                f"  round {round_no} {case:8s} {r['rps']:9.0f} req/s  p50 {r['p50_us']:7.0f} µs  "
                f"p99 {r['p99_us']:7.0f} µs  errors {r['errors']}",
                flush=True,
            )

    def median(case: str) -> dict[str, Any]:
        runs = sorted(results[case], key=lambda r: r["rps"])
        return runs[len(runs) // 2]

    summary = {case: median(case) for case in cases}
    print(
        f"\n{'case':10s} {'req/s':>9s} {'p50 µs':>8s} {'p99 µs':>8s} {'app µs/req':>11s}"
        f" {'proxy µs/req':>13s} {'errors':>7s}"
    )
    for case, r in summary.items():
        print(
            f"{case:10s} {r['rps']:9.0f} {r['p50_us']:8.0f} {r['p99_us']:8.0f} "
            f"{r['app_cpu_us']:11.1f} {r['proxy_cpu_us']:13.1f} {r['errors']:7d}"
        )
    if "direct" in summary:
        base = summary["direct"]
        for case in cases:
            if case == "direct":
                continue
            r = summary[case]
            print(
                f"{case} vs direct: {r['rps'] / base['rps']:.2f}x req/s, "
                f"p50 +{r['p50_us'] - base['p50_us']:.0f} µs, "
                f"p99 +{r['p99_us'] - base['p99_us']:.0f} µs"
            )
    spread = {
        case: f"{statistics.pstdev([r['rps'] for r in runs]) / statistics.mean([r['rps'] for r in runs]):.1%}"
        for case, runs in results.items()
    }
    print(f"run-to-run spread of req/s (stdev/mean): {spread}")
    (work / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
