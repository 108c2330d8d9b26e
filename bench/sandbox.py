"""What the app sandbox costs, sandboxed and unsandboxed in one run (issue 7, "Performance").

    .venv/bin/python bench/sandbox.py [--rounds 3] [--starts 20] [--seconds 10]

1. **Instance start**: ``LocalDriver.start`` → the first healthy answer (``GET /healthz``
   polled every 5 ms through ``LocalDriver.health``, i.e. through the instance's network
   namespace when sandboxed), for the fixture app ``tests/fixtures/apps/hello``
   (``run_command: python3 app.py``), with ``LocalDriver(dir, sandbox=detect())`` and
   ``LocalDriver(dir)``, ``--starts`` times each, interleaved (the order alternates). Also
   ``prepare`` (the source copy; hello has no build step) and ``stop`` of each, and what the
   sandbox's parts cost on their own (the argv chain around ``true``, a network namespace,
   Python's start-up inside and outside, a cgroup, a socket made inside a namespace).
2. **Deploy to live** per strategy, ``Settings.sandbox`` ``off`` and ``on``, interleaved:
   ``bench/deploy.py``'s :func:`deploy.measure` (``--rounds`` rounds).
3. **Ingress**: the app behind the HAProxy data plane (``Namespaces`` over
   ``driver.netns_fd``, as in ``appdeck.app``), unsandboxed (upstream ``127.0.0.1:<port>``)
   and sandboxed (``<release>.0@127.0.0.1:8000``, reached with HAProxy's ``namespace``),
   loaded with wrk (``bench/ingress.py``'s Lua script and runner): the server process
   (driver, HAProxy and the app it starts) pinned to CPU 0, wrk to CPU 1, 20 connections,
   ``--seconds`` per case after a 2 s warm-up, ``--rounds`` interleaved rounds with fresh
   processes, median round. ``app-direct`` (wrk → the unsandboxed app, no ingress) is the
   reference. (The in-process Python ingress, measured here before, and its no-pool cases
   were removed with issue 21.) Two apps: hello, and ``fast`` (``FAST_APP``,
   a stdlib asyncio server written by this script): hello's ``http.server`` sends a response
   head and body in two writes, so on a keep-alive connection every request waits out a
   delayed ACK (~40 ms) and nothing of the proxy path shows.

``PATH`` is the system's for the whole run (``deploy.use_system_python``): ``python3`` is
``/usr/bin/python3`` inside the sandbox and out. Needs root, bubblewrap, taskset and wrk
(installed with apt-get when missing, as ``bench/ingress.py`` does). Raw figures go to
``bench/.work/sandbox.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deploy

import ingress as ingress_bench
from appdeck.runtime import LocalDriver, netns
from appdeck.runtime.cgroups import Limits
from appdeck.runtime.model import Handle
from appdeck.runtime.sandbox import Sandbox, detect

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
HELLO = ROOT / "tests" / "fixtures" / "apps" / "hello"
APP_ID = 7
HEALTH_POLL_S = 0.005
MODES = ("off", "on")


def spec(source: Path, number: int) -> Any:
    """Release ``<APP_ID>-<number>`` of hello, as the driver takes it (``ReleaseSpec``, or
    ``appdeck.model.release.Release`` where the runtime takes that)."""
    try:
        from appdeck.runtime import ReleaseSpec  # type: ignore[attr-defined]
    except ImportError:
        from appdeck.model.release import AppSpec, Release

        app = AppSpec.from_dict(
            {
                "runtime": "command",
                "run_command": deploy.RUN_COMMAND,
                "health_check": {"path": "/healthz", "timeout_s": 1.0},
                "build_timeout_s": 60.0,
            }
        )
        env = {"GREETING": "bench"}
        return Release(APP_ID, "hello", number, app, env, "hello", source)
    return ReleaseSpec(
        app_id=APP_ID,
        app_name="hello",
        release_id=f"{APP_ID}-{number}",
        source_path=source,
        runtime="command",
        run_command=deploy.RUN_COMMAND,
        env={"GREETING": "bench"},
        health_path="/healthz",
        health_timeout_s=1.0,
        build_timeout_s=60.0,
    )


FAST_APP = """\
# A stdlib asyncio HTTP/1.1 keep-alive server: one write per response (TCP_NODELAY, as asyncio
# sets it), a fixed 200 to every GET. The ingress's own costs show against it; hello's do not
# (http.server writes the head and the body apart: Nagle plus delayed ACKs, ~40 ms a request).
import asyncio, os

BODY = b'{"ok": true}'
ANSWER = b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: %d\\r\\n\\r\\n%s" % (
    len(BODY), BODY)


class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        while b"\\r\\n\\r\\n" in self.buffer:
            _, self.buffer = self.buffer.split(b"\\r\\n\\r\\n", 1)
            self.transport.write(ANSWER)


async def main():
    loop = asyncio.get_running_loop()
    host, port = os.environ.get("HOST", "127.0.0.1"), int(os.environ["PORT"])
    server = await loop.create_server(Answer, host, port, backlog=1024)
    print(f"fast listening on {host}:{port}", flush=True)
    await server.serve_forever()


asyncio.run(main())
"""


def source_copy(work: Path, app: str = "hello") -> Path:
    source = work / "src" / app
    if app == "hello":
        shutil.copytree(HELLO, source)
    else:
        source.mkdir(parents=True)
        (source / "app.py").write_text(FAST_APP)
        (source / "app.py").chmod(0o644)
    for path in (work, work / "src", source):
        path.chmod(0o755)
    return source


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:.1f}"


async def wait_healthy(driver: LocalDriver, ref: Handle, within: float = 15.0) -> None:
    deadline = time.perf_counter() + within
    while not (await driver.check(ref, timeout_s=1.0)).ok:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{ref.release_id} not healthy within {within:g} s")
        await asyncio.sleep(HEALTH_POLL_S)


# -- 1. instance start ----------------------------------------------------------------------


async def one_start(
    driver: LocalDriver,
    source: Path,
    number: int,
    on_healthy: Callable[[LocalDriver, Handle], None] | None = None,
) -> dict[str, float]:
    release = spec(source, number)
    release_id = release.release_id
    t0 = time.perf_counter()
    await driver.prepare(release)
    t1 = time.perf_counter()
    port = 8000 if driver.capabilities().own_network else deploy_free_port()
    ref = await driver.launch(release, 0, port)
    t2 = time.perf_counter()
    await wait_healthy(driver, ref)
    t3 = time.perf_counter()
    if on_healthy is not None:
        on_healthy(driver, ref)
    await driver.stop(release_id, grace_s=5.0)
    t4 = time.perf_counter()
    await driver.remove(release_id)
    return {"prepare": t1 - t0, "start_call": t2 - t1, "start": t3 - t1, "stop": t4 - t3}


def deploy_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def starts(
    work: Path, sandbox: Sandbox, count: int, socket_results: dict[str, float]
) -> dict[str, list[dict[str, float]]]:
    source = source_copy(work)
    drivers = {
        "off": LocalDriver(work / "runtime-off"),
        "on": LocalDriver(work / "runtime-on", sandbox=sandbox),
    }
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    try:

        def socket_costs(driver: LocalDriver, ref: Handle) -> None:
            fd = driver.netns_fd(ref.netns or "")
            assert fd is not None
            socket_results.update(sockets(fd, 20_000))

        for driver in drivers.values():  # warm the page cache and the interpreters
            await one_start(
                driver, source, 999, socket_costs if driver.capabilities().own_network else None
            )
        for n in range(count):
            order = MODES if n % 2 == 0 else MODES[::-1]
            for mode in order:
                results[mode].append(await one_start(drivers[mode], source, n + 1))
            line = "  ".join(f"{mode}: start {ms(results[mode][-1]['start'])} ms" for mode in MODES)
            print(f"  start {n + 1:2d}/{count}  {line}", flush=True)
    finally:
        for driver in drivers.values():
            for release_id in await driver.releases():
                with contextlib.suppress(Exception):
                    await driver.remove(release_id)
            await driver.detach()
    return results


# -- 1b. the sandbox's parts ----------------------------------------------------------------


def timed_run(argv: list[str], cwd: Path) -> float:
    env = {"PATH": deploy.SYSTEM_PATH, "LANG": os.environ.get("LANG", "C.UTF-8")}
    start = time.perf_counter()
    subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - start


def parts(work: Path, sandbox: Sandbox, count: int) -> dict[str, list[float]]:
    """Each piece of an instance's start, alone: what the sandbox adds and where."""
    ws = work / "parts-ws"
    ws.mkdir(mode=0o755)
    uid = sandbox.uid_for(APP_ID)
    os.chown(ws, uid, uid)
    py_import = ["/usr/bin/python3", "-c", "import http.server, json, threading"]

    def wrap(command: list[str], own_network: bool = False) -> list[str]:
        return sandbox.wrap(command, app_id=APP_ID, own_network=own_network, workspace=ws)

    cases = {
        "true": ["/usr/bin/true"],
        "unshare --net true": ["unshare", "--net", "/usr/bin/true"],
        "sandbox argv around true": wrap(["/usr/bin/true"]),
        "sandbox argv around true, bwrap --unshare-net (builds)": wrap(
            ["/usr/bin/true"], own_network=True
        ),
        "python3 -c 'import http.server'": py_import,
        "the same in the sandbox": wrap(py_import),
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    results["cgroup create + remove"] = []
    for argv in cases.values():  # warm-up
        timed_run(argv, ws)
    for _ in range(count):
        for name, argv in cases.items():
            results[name].append(timed_run(argv, ws))
        if sandbox.cgroups is not None:
            start = time.perf_counter()
            sandbox.cgroups.create("bench-parts.0", Limits())
            sandbox.cgroups.remove("bench-parts.0")
            results["cgroup create + remove"].append(time.perf_counter() - start)
    return results


def sockets(netns_fd: int, count: int) -> dict[str, float]:
    """µs per socket created, and per connect + close, on the host's loopback and inside the
    instance's namespace (``netns.socket_in``, as the ingress and the health checks make
    them), against listeners of this script's own (hello's backlog of 5 would measure hello)."""

    def host_socket() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setblocking(False)
        return sock

    def ns_socket() -> socket.socket:
        return netns.socket_in(netns_fd)

    out: dict[str, float] = {}
    for name, make in (("host", host_socket), ("namespace", ns_socket)):
        for _ in range(100):
            make().close()
        start = time.perf_counter()
        for _ in range(count):
            make().close()
        out[f"socket created in the {name}"] = (time.perf_counter() - start) / count * 1e6
    connects = min(count, 2000)
    for name, make in (("host", host_socket), ("namespace", ns_socket)):
        with make() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(4096)
            address = listener.getsockname()
            start = time.perf_counter()
            for _ in range(connects):
                sock = make()
                sock.setblocking(True)
                sock.connect(address)
                sock.close()
            out[f"connect + close in the {name}"] = (time.perf_counter() - start) / connects * 1e6
    return out


# -- 3. ingress -----------------------------------------------------------------------------


async def serve(mode: str, app: str, work: Path) -> None:
    """The server side of one ingress case: a driver, the app started by it, and the HAProxy
    data plane in front (reaching a sandboxed instance in its namespace, by name, as
    ``appdeck serve`` does); prints one JSON line when ready."""
    import secrets

    from appdeck.ingress import Backend
    from appdeck.ingress.haproxy.config import Layout
    from appdeck.ingress.haproxy.namespaces import Namespaces
    from appdeck.ingress.haproxy.plane import HAProxyCounters, HAProxyDataPlane, HAProxyTable
    from appdeck.tuning import tune_gc

    deploy.use_system_python()
    source = source_copy(work, app)
    driver = LocalDriver(work / "runtime", sandbox=detect() if mode == "on" else None)
    release = spec(source, 1)
    await driver.prepare(release)
    ref = await driver.launch(release, 0, 8000 if mode == "on" else deploy_free_port())
    names = Namespaces(secrets.token_hex(6), driver.netns_fd)
    table = HAProxyTable()
    plane = HAProxyDataPlane(
        table,
        HAProxyCounters(),
        Layout(Path(tempfile.mkdtemp(prefix="hxs", dir="/tmp"))),
        port=deploy_free_port(),
        namespaces=names,
    )
    try:
        await wait_healthy(driver, ref)
        address = f"127.0.0.1:{ref.port}"
        upstream = f"{ref.netns}@{address}" if ref.netns else address
        table.set(ingress_bench.APP, [Backend(release.release_id, 100, [upstream])])
        port = await plane.start()
        plane.settle()
        if not await plane.synced():
            raise RuntimeError("HAProxy did not take the route")
        tune_gc()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        ready = {"haproxy": port, "app_port": ref.port, "shim": ref.pid, "upstream": upstream}
        print(json.dumps(ready), flush=True)
        await stop.wait()
    finally:
        await plane.stop(haproxy=True)
        names.clear()
        shutil.rmtree(plane.layout.directory, ignore_errors=True)
        await driver.stop(release.release_id, grace_s=2.0)
        await driver.remove(release.release_id)
        await driver.detach()


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_cpu(root: int) -> float:
    total = 0.0
    for pid in descendants(root):
        with contextlib.suppress(OSError):
            total += ingress_bench.cpu_seconds(pid)
    return total


def check(port: int, app: str) -> None:
    """One request by hand through ``port``: the app's JSON answer, status 200."""
    expect = b'"app": "hello"' if app == "hello" else b'{"ok": true}'
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET / HTTP/1.1\r\nHost: {ingress_bench.APP}.localhost\r\n\r\n".encode())
        data = b""
        while expect not in data and len(data) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    if not data.startswith(b"HTTP/1.1 200") or expect not in data:
        sys.exit(f"unexpected answer on port {port}: {data[:200]!r}")


def start_server(
    mode: str, app: str, work: Path, cpu: int
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    work.mkdir(parents=True)
    log = (work / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            *ingress_bench.pinned(cpu),
            sys.executable,
            __file__,
            *("--serve", mode, "--app", app, "--work", str(work)),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else b""
    if not line:
        proc.kill()
        log.close()
        tail = (work / "serve.log").read_text(errors="replace")[-3000:]
        sys.exit(f"the {mode} server did not start:\n{tail}")
    return proc, json.loads(line)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


INGRESS_CASES = {
    # case: (app, server mode, which port)
    "fast: app-direct": ("fast", "off", "app_port"),
    "fast: HAProxy → host loopback": ("fast", "off", "haproxy"),
    "fast: HAProxy → namespace": ("fast", "on", "haproxy"),
    "hello: HAProxy → host loopback": ("hello", "off", "haproxy"),
    "hello: HAProxy → namespace": ("hello", "on", "haproxy"),
}


def ingress(args: argparse.Namespace, work: Path) -> dict[str, list[dict[str, Any]]]:
    script = work / "host.lua"
    script.write_text(ingress_bench.WRK_LUA % {"host": f"{ingress_bench.APP}.localhost"})
    results: dict[str, list[dict[str, Any]]] = {case: [] for case in INGRESS_CASES}
    for round_no in range(args.rounds):
        order = MODES if round_no % 2 == 0 else MODES[::-1]
        for app in ("fast", "hello"):
            for mode in order:
                where = work / f"serve-{app}-{mode}-{round_no}"
                proc, ready = start_server(mode, app, where, args.server_cpu)
                try:
                    for case, spot in INGRESS_CASES.items():
                        if spot[:2] == (app, mode):
                            results[case].append(load(args, script, case, proc, ready, spot))
                finally:
                    stop_server(proc)
    return results


def load(
    args: argparse.Namespace,
    script: Path,
    case: str,
    proc: subprocess.Popen[bytes],
    ready: dict[str, Any],
    spot: tuple[str, str, str],
) -> dict[str, Any]:
    app, _, which = spot
    port = ready[which]
    check(port, app)
    ingress_bench.wrk(port, 2, args.connections, script, args.client_cpu)
    before = (ingress_bench.cpu_seconds(proc.pid), tree_cpu(ready["shim"]))
    r = ingress_bench.wrk(port, args.seconds, args.connections, script, args.client_cpu)
    after = (ingress_bench.cpu_seconds(proc.pid), tree_cpu(ready["shim"]))
    r["connections"] = args.connections
    r["ingress_cpu_us"] = (
        0.0 if which == "app_port" else (after[0] - before[0]) / r["requests"] * 1e6
    )
    r["app_cpu_us"] = (after[1] - before[1]) / r["requests"] * 1e6
    print(
        f"  {case:40s} {r['rps']:7.0f} req/s  p50 {r['p50_us'] / 1000:6.2f} ms  "
        f"p99 {r['p99_us'] / 1000:6.2f} ms  errors {r['errors']}",
        flush=True,
    )
    return r


# -- the report -----------------------------------------------------------------------------


def report(
    start_results: dict[str, list[dict[str, float]]],
    part_results: dict[str, list[float]],
    socket_results: dict[str, float],
    deploy_results: dict[str, deploy.Timings] | None,
    ingress_results: dict[str, list[dict[str, Any]]] | None,
) -> None:
    print("\n### Instance start (ms)\n")
    print("| measure | unsandboxed median | p90 | sandboxed median | p90 | difference (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for key, label in (
        ("start", "`start` → first healthy answer"),
        ("start_call", "of which `start()` itself"),
        ("prepare", "prepare (source copy, no build)"),
        ("stop", "stop (SIGTERM, clean exit)"),
    ):
        off = [r[key] for r in start_results["off"]]
        on = [r[key] for r in start_results["on"]]
        print(
            f"| {label} | {ms(statistics.median(off))} | {ms(pct(off, 0.9))} | "
            f"{ms(statistics.median(on))} | {ms(pct(on, 0.9))} | "
            f"{(statistics.median(on) - statistics.median(off)) * 1000:+.1f} |"
        )
    print("\n### The sandbox's parts, alone (ms, median / p90)\n")
    print("| piece | median | p90 |")
    print("|---|---:|---:|")
    for name, values in part_results.items():
        if values:
            print(f"| {name} | {ms(statistics.median(values))} | {ms(pct(values, 0.9))} |")
    for name, value in socket_results.items():
        print(f"| {name} (µs) | {value:.1f} | - |")
    if deploy_results is not None:
        print("\n### Deploy to live, 2 instances (ms, median)\n")
        print("| strategy | unsandboxed | runs | sandboxed | runs | difference |")
        print("|---|---:|---|---:|---|---:|")
        for strategy in deploy.STRATEGIES:
            off = deploy_results["off"].deploys[strategy]
            on = deploy_results["on"].deploys[strategy]
            print(
                f"| {strategy} | {statistics.median(off) * 1000:.0f} | "
                + ", ".join(f"{v * 1000:.0f}" for v in off)
                + f" | {statistics.median(on) * 1000:.0f} | "
                + ", ".join(f"{v * 1000:.0f}" for v in on)
                + f" | {(statistics.median(on) - statistics.median(off)) * 1000:+.0f} |"
            )
        off_s, on_s = deploy_results["off"].switches, deploy_results["on"].switches
        print(
            f"| rollback to a warm release | {statistics.median(off_s) * 1000:.1f} | "
            + ", ".join(f"{v * 1000:.1f}" for v in off_s)
            + f" | {statistics.median(on_s) * 1000:.1f} | "
            + ", ".join(f"{v * 1000:.1f}" for v in on_s)
            + f" | {(statistics.median(on_s) - statistics.median(off_s)) * 1000:+.1f} |"
        )
    if ingress_results is not None:
        print("\n### Ingress (median round by req/s)\n")
        print(
            "| case | conns | req/s | rounds' req/s | p50 ms | p99 ms | errors | "
            "ingress CPU/req µs | app+shim CPU/req µs |"
        )
        print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
        for case, runs in ingress_results.items():
            if not runs:
                continue
            r = sorted(runs, key=lambda x: x["rps"])[len(runs) // 2]
            print(
                f"| {case} | {r['connections']} | {r['rps']:,.0f} | "
                + " / ".join(f"{x['rps']:,.0f}" for x in runs)
                + f" | {r['p50_us'] / 1000:.2f} | {r['p99_us'] / 1000:.2f} | {r['errors']} | "
                f"{r['ingress_cpu_us']:.0f} | {r['app_cpu_us']:.0f} |"
            )


async def measure(args: argparse.Namespace, work: Path, sandbox: Sandbox) -> dict[str, Any]:
    print(f"instance start, {args.starts} per mode, interleaved:", flush=True)
    socket_results: dict[str, float] = {}
    start_results = await starts(work, sandbox, args.starts, socket_results)
    print("the sandbox's parts:", flush=True)
    part_results = await asyncio.to_thread(parts, work, sandbox, args.starts)
    return {"starts": start_results, "parts": part_results, "sockets": socket_results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="deploy and ingress rounds")
    parser.add_argument("--starts", type=int, default=20, help="instance starts per mode")
    parser.add_argument("--seconds", type=int, default=10, help="wrk seconds per ingress case")
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--skip", default="", help="comma-separated: deploy, ingress")
    parser.add_argument("--serve", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--app", choices=["hello", "fast"], default="hello", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        import uvloop

        uvloop.run(serve(args.serve, args.app, args.work))
        return

    skip = set(filter(None, args.skip.split(",")))
    if "ingress" not in skip and shutil.which("wrk") is None:
        if shutil.which("apt-get") and os.geteuid() == 0:
            subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=False)
        if shutil.which("wrk") is None:
            sys.exit("wrk is required: apt-get install -y wrk")
    deploy.use_system_python()
    sandbox = detect()
    work = Path(tempfile.mkdtemp(prefix="appdeck-bench-sandbox-"))
    work.chmod(0o755)
    try:
        results = asyncio.run(measure(args, work, sandbox))
        deploy_results = None
        if "deploy" not in skip:
            print(f"deploy to live, {args.rounds} rounds, interleaved:", flush=True)
            deploy_results = asyncio.run(deploy.measure(MODES, args.rounds))
            deploy.report(deploy_results, args.rounds)
            results["deploy"] = {
                mode: {"deploys": t.deploys, "switches": t.switches}
                for mode, t in deploy_results.items()
            }
        ingress_results = None
        if "ingress" not in skip:
            print(
                f"ingress: {args.connections} connections, {args.seconds} s x {args.rounds} "
                f"rounds; server on CPU {args.server_cpu}, wrk on CPU {args.client_cpu}",
                flush=True,
            )
            ingress_results = ingress(args, work)
            results["ingress"] = ingress_results
        report(
            results["starts"],
            results["parts"],
            results["sockets"],
            deploy_results,
            ingress_results,
        )
        out = BENCH / ".work"
        out.mkdir(exist_ok=True)
        (out / "sandbox.json").write_text(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
