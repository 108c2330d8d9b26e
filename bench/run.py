"""AppDeck vs the official MCP Python SDK: throughput, latency and idle-session memory.

One run on loopback, two parts:

1. ``tools/call`` (echo) and ``tools/list`` on AppDeck (``bench/appdeck_server.py``: with bearer
   auth as ``appdeck serve`` runs, and with ``AllowAnonymous``) and on a reference server built
   on the SDK's low-level ``Server`` (``bench/sdk_server.py``: Streamable HTTP, JSON response
   mode, stateful). Every server is pinned to one core (``taskset -c 0``; they all start at once
   but only one is under load at a time), the load generator (``wrk`` + Lua, or
   ``bench/pyload.py`` as a fallback) to the other (``taskset -c 1``). Per server: one session
   initialized first and one verified request per method (httpx); per case a warm-up, then
   ``--rounds`` interleaved runs of ``--seconds`` closed-loop load over ``--connections``
   keep-alive connections; the median run is reported. Every response must be a 200 carrying a
   JSON-RPC result; anything else counts as an error. The server's CPU time and the other work
   on both cores are recorded too (this machine may be shared).
2. Idle-session memory: VmRSS of a fresh server process empty, then after ``--sessions``
   ``initialize`` requests (``--session-concurrency`` in flight), for AppDeck and the SDK.

    .venv/bin/python bench/run.py --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pyload

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / ".work"
PROTOCOL = "2025-11-25"
HOST = "127.0.0.1"

# label -> (script, extra arguments, sends a bearer token). "AppDeck" is the production path
# (bearer auth + rate-limit check + audit log); "AppDeck-anon" swaps in AllowAnonymous.
SERVERS: dict[str, tuple[Path, list[str], bool]] = {
    "AppDeck": (BENCH / "appdeck_server.py", ["--auth", "bearer"], True),
    "AppDeck-anon": (BENCH / "appdeck_server.py", ["--auth", "anonymous"], False),
    "SDK": (BENCH / "sdk_server.py", [], False),
    # MCP 2026-07-28 (issue 22): no session; every request carries _meta and routing headers
    "AppDeck-2026": (BENCH / "appdeck_server.py", ["--auth", "bearer", "--stateless"], True),
    "SDK-2026": (BENCH / "sdk_server.py", [], False),
    # issue 23: every request traced (100 % sampled) into an OTLP receiver that drops them
    "AppDeck-traced": (BENCH / "appdeck_server.py", ["--auth", "bearer", "--traced"], True),
    # appdeck serve's default log level: an activity line per tools/call (to the server's log)
    "AppDeck-info": (
        BENCH / "appdeck_server.py",
        ["--auth", "bearer", "--log-level", "info"],
        True,
    ),
}
STATELESS = "2026-07-28"


def is_stateless(name: str) -> bool:
    """Servers loaded with stateless (2026-07-28) requests: their label ends in ``-2026``."""
    return name.endswith("-2026")


BASELINE = "AppDeck-base"
"""With ``--baseline DIR``: the AppDeck server of another checkout (``DIR``, e.g. a
``git worktree`` of an older commit), run in the same rounds for a before/after comparison."""
BASELINE_2026 = BASELINE + "-2026"
"""With ``--baseline DIR`` and ``AppDeck-2026`` among the servers: that checkout's server in
the stateless era (2026-07-28) as well."""
BASELINE_DIR: Path | None = None
# One body per method; %d is the JSON-RPC id (unique per request: the SDK routes responses by id).
BODIES = {
    "tools/call": (
        '{"jsonrpc":"2.0","id":%d,"method":"tools/call",'
        '"params":{"name":"echo","arguments":{"text":"hello"}}}'
    ),
    "tools/list": '{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{}}',
}
_META = (
    '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    '"io.modelcontextprotocol/clientCapabilities":{}}'
)
STATELESS_BODIES = {
    "tools/call": (
        '{"jsonrpc":"2.0","id":%d,"method":"tools/call",'
        '"params":{"name":"echo","arguments":{"text":"hello"},' + _META + "}}"
    ),
    "tools/list": '{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{' + _META + "}}",
}
"""The same requests in the stateless era: ``_meta`` names the version and capabilities."""
ROUTING = {"tools/call": {"Mcp-Method": "tools/call", "Mcp-Name": "echo"}}


def case_headers(server_name: str, method: str, session: str) -> dict[str, str]:
    """The MCP headers of one case: the session's, or the stateless era's routing headers."""
    if is_stateless(server_name):
        return {
            "MCP-Protocol-Version": STATELESS,
            **ROUTING.get(method, {"Mcp-Method": method}),
        }
    return {"MCP-Protocol-Version": PROTOCOL, "Mcp-Session-Id": session}


def body_of(server_name: str, method: str) -> str:
    return (STATELESS_BODIES if is_stateless(server_name) else BODIES)[method]


BASE_HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "appdeck-bench", "version": "0"},
    },
}

WRK_LUA = r"""
-- generated by bench/run.py
local path = "/mcp"
local headers = {
  ["Content-Type"] = "application/json",
  ["Accept"] = "application/json, text/event-stream",%(mcp_headers)s%(auth)s
}
local fmt = '%(body)s'
local counter = %(id_base)d
local threads = {}
bad = 0

function setup(thread)
  table.insert(threads, thread)
end

function request()
  counter = counter + 1
  return wrk.format("POST", path, headers, string.format(fmt, counter))
end

function response(status, hdrs, body)
  if status ~= 200 or not string.find(body, '"result"', 1, true)
      or string.find(body, '"isError":true', 1, true) then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do b = b + t:get("bad") end
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%%d,"duration_us":%%d,"connect":%%d,"read":%%d,"write":%%d,'
    .. '"status":%%d,"timeout":%%d,"bad":%%d,"p50_us":%%f,"p90_us":%%f,"p99_us":%%f,'
    .. '"max_us":%%f,"mean_us":%%f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout, b,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
"""


# -- environment ---------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def version_of(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def git_state() -> str:
    """HEAD and whether src/ has uncommitted changes (read-only git commands)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    except OSError:
        return "?"
    return f"{head}{' + uncommitted changes in src/' if dirty else ''}"


def environment(loadgen: str) -> dict[str, Any]:
    wrk = "-"
    if loadgen == "wrk":
        out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
        wrk = (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else "?"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": {
            p: version_of(p)
            for p in ("mcp", "uvicorn", "uvloop", "httptools", "orjson", "starlette", "appdeck")
        },
        "appdeck_git": git_state(),
        "loadgen": loadgen,
        "wrk": wrk,
        "loadavg_start": Path("/proc/loadavg").read_text().strip(),
    }


def ensure_wrk(mode: str) -> str:
    """``wrk`` when available (installed with apt-get if missing and allowed), else ``python``."""
    if mode == "python":
        return "python"
    if shutil.which("wrk") is None and shutil.which("apt-get") and os.geteuid() == 0:
        print("wrk not found; installing it with apt-get ...", flush=True)
        cmd = ["apt-get", "install", "-y", "-q", "wrk"]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.run(cmd, capture_output=True, env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
            subprocess.run(cmd, capture_output=True, env=env, check=False)
    if shutil.which("wrk"):
        return "wrk"
    if mode == "wrk":
        sys.exit("wrk is required (--loadgen wrk) but could not be installed")
    print("wrk unavailable: falling back to the Python load generator (bench/pyload.py)")
    return "python"


# -- server processes ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def cpu_busy_seconds(cpu: int | None) -> float:
    """Non-idle time of one CPU so far (all processes), from /proc/stat."""
    if cpu is None:
        return 0.0
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            ticks = [int(x) for x in line.split()[1:]]
            return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    return 0.0


def wait_for_quiet(args: Any) -> None:
    """Wait (at most ``--quiet-wait`` s) until both benchmark CPUs are >= 90 % idle for 1 s:
    other work on this machine would otherwise steal time from the server or the client."""
    if args.server_cpu is None:
        return
    cpus = (args.server_cpu, args.client_cpu)
    deadline = time.monotonic() + args.quiet_wait
    while True:
        before = [cpu_busy_seconds(c) for c in cpus]
        time.sleep(1.0)
        busy = [cpu_busy_seconds(c) - b for c, b in zip(cpus, before, strict=True)]
        if max(busy) < 0.1:
            return
        if time.monotonic() > deadline:
            print(
                f"    (CPUs {cpus} still {busy[0]:.0%}/{busy[1]:.0%} busy with other work; "
                "going on)",
                flush=True,
            )
            return


NICE = 0


def taskset(cpu: int | None) -> list[str]:
    """The command prefix that pins a process to ``cpu`` (and applies ``--nice``)."""
    prefix = ["nice", "-n", str(NICE)] if NICE else []
    if cpu is not None and shutil.which("taskset"):
        prefix += ["taskset", "-c", str(cpu)]
    return prefix


@dataclass
class ServerProc:
    name: str
    cpu: int | None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    token: str | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/mcp"

    def start(self, timeout: float = 60.0) -> None:
        WORK.mkdir(exist_ok=True)
        stem = f"{self.name.lower()}-{self.port}"
        self.log = WORK / f"{stem}.log"
        script, extra, wants_token = SERVERS[self.name]
        # AppDeck servers side by side: each its own data plane port
        env = (
            {**os.environ, "APPDECK_INGRESS_PORT": "0"}
            if script.name == "appdeck_server.py"
            else None
        )
        if self.name.startswith(BASELINE) and BASELINE_DIR is not None:
            script = BASELINE_DIR / "bench" / "appdeck_server.py"
            # its own package first on the path; an ingress port of its own
            env = {**os.environ, "PYTHONPATH": str(BASELINE_DIR / "src")}
            env["APPDECK_INGRESS_PORT"] = "0"
        token_file = WORK / f"{stem}.token"
        token_file.unlink(missing_ok=True)
        if wants_token:
            extra = [*extra, "--token-file", str(token_file)]
        cmd = [*taskset(self.cpu), sys.executable, str(script), "--port", str(self.port), *extra]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited; see {self.log}")
            if not wants_token or token_file.exists():
                with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 0.2):
                    if wants_token:
                        self.token = token_file.read_text().strip()
                        token_file.unlink()
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} server did not listen within {timeout}s; see {self.log}")

    def headers(self, session: str | None = None) -> dict[str, str]:
        out = dict(BASE_HEADERS)
        if self.token:
            out["authorization"] = f"Bearer {self.token}"
        if session is not None:
            out["mcp-protocol-version"] = PROTOCOL
            out["mcp-session-id"] = session
        return out

    def rss_bytes(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


# -- MCP over HTTP (httpx, for set-up and verification) -------------------------------------


def open_session(client: httpx.Client, server: ServerProc) -> str:
    if is_stateless(server.name):
        return ""  # nothing to open: every request stands alone
    r = client.post(server.url, json=INITIALIZE, headers=server.headers())
    r.raise_for_status()
    session = r.headers.get("mcp-session-id")
    if not session or r.json().get("result", {}).get("protocolVersion") != PROTOCOL:
        raise RuntimeError(f"initialize failed: {r.status_code} {r.text[:300]}")
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = client.post(server.url, json=note, headers=server.headers(session))
    if r.status_code != 202:
        raise RuntimeError(f"notifications/initialized: {r.status_code} {r.text[:300]}")
    return session


def verify(client: httpx.Client, server: ServerProc, session: str, method: str) -> None:
    """One request of the case, checked in full before any timing."""
    body = body_of(server.name, method) % 424242
    headers = server.headers()
    headers.update(case_headers(server.name, method, session))
    r = client.post(server.url, content=body, headers=headers)
    if r.status_code != 200:
        raise RuntimeError(f"{server.name} {method}: HTTP {r.status_code} {r.text[:300]}")
    msg = r.json()
    result = msg.get("result")
    if msg.get("id") != 424242 or not isinstance(result, dict):
        raise RuntimeError(f"{server.name} {method}: not a JSON-RPC result: {r.text[:300]}")
    if method == "tools/call":
        ok = result.get("content") == [{"type": "text", "text": "hello"}] and not result.get(
            "isError"
        )
    else:
        tools = result.get("tools") or []
        ok = len(tools) == 1 and tools[0].get("name") == "echo" and "inputSchema" in tools[0]
    if not ok:
        raise RuntimeError(f"{server.name} {method}: unexpected result {r.text[:300]}")


# -- load generation -----------------------------------------------------------------------


@dataclass
class LoadResult:
    requests: int
    duration_us: float
    connect: int
    read: int
    write: int
    status: int
    timeout: int
    bad: int
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float
    mean_us: float
    server_cpu_s: float = 0.0
    """CPU time the server used during the run (utime + stime)."""
    others_cpu_s: float = 0.0
    """Busy time of the server's CPU not used by the server (other processes, interrupts)."""
    client_cpu_s: float = 0.0
    """CPU time of the load generator."""
    client_others_cpu_s: float = 0.0
    """Busy time of the client's CPU not used by the load generator."""
    round_rps: list[float] = field(default_factory=list)
    """req/s of every round of this case (this result is the median one)."""

    @property
    def rps(self) -> float:
        return self.requests / (self.duration_us / 1e6) if self.duration_us else 0.0

    @property
    def cpu_util(self) -> float:
        return self.server_cpu_s / (self.duration_us / 1e6) if self.duration_us else 0.0

    @property
    def others_util(self) -> float:
        return self.others_cpu_s / (self.duration_us / 1e6) if self.duration_us else 0.0

    @property
    def client_util(self) -> float:
        return self.client_cpu_s / (self.duration_us / 1e6) if self.duration_us else 0.0

    @property
    def client_others_util(self) -> float:
        return self.client_others_cpu_s / (self.duration_us / 1e6) if self.duration_us else 0.0

    @property
    def per_cpu_second(self) -> float:
        """Requests per second of server CPU: robust to other load on the server's core."""
        return self.requests / self.server_cpu_s if self.server_cpu_s else 0.0

    @property
    def errors(self) -> int:
        # "bad" counts every response that is not a 200 with a JSON-RPC result (it includes
        # wrk's "Non-2xx or 3xx responses"); the rest are socket errors and timeouts.
        return self.bad + self.connect + self.read + self.write + self.timeout


_id_base = 0


def run_load(
    loadgen: str, server: ServerProc, session: str, method: str, seconds: float, args: Any
) -> LoadResult:
    global _id_base
    _id_base += 100_000_000  # ids never repeat within a session, across runs either
    body = body_of(server.name, method)
    if loadgen == "wrk":
        WORK.mkdir(exist_ok=True)
        script = WORK / f"{server.name.lower()}-{method.replace('/', '-')}.lua"
        mcp_headers = "".join(
            f'\n  ["{k}"] = "{v}",' for k, v in case_headers(server.name, method, session).items()
        )
        script.write_text(
            WRK_LUA
            % {
                "mcp_headers": mcp_headers,
                "auth": f'\n  ["Authorization"] = "Bearer {server.token}",' if server.token else "",
                "body": body,
                "id_base": _id_base,
            }
        )
        cmd = [
            *taskset(args.client_cpu),
            "wrk",
            "-t1",
            f"-c{args.connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            f"http://{HOST}:{server.port}/mcp",
        ]
    else:
        if is_stateless(server.name):
            raise RuntimeError("the stateless cases need wrk (bench/pyload.py sends sessions)")
        cmd = [
            *taskset(args.client_cpu),
            sys.executable,
            str(BENCH / "pyload.py"),
            "--port",
            str(server.port),
            "--session",
            session,
            "--body",
            body,
            "--seconds",
            str(seconds),
            "--connections",
            str(args.connections),
            "--id-base",
            str(_id_base),
            *(["--token", server.token] if server.token else []),
        ]
    cpu0, core0 = server.cpu_seconds(), cpu_busy_seconds(args.server_cpu)
    kids0, client_core0 = (
        resource.getrusage(resource.RUSAGE_CHILDREN),
        cpu_busy_seconds(args.client_cpu),
    )
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    cpu = server.cpu_seconds() - cpu0
    others = max(0.0, cpu_busy_seconds(args.server_cpu) - core0 - cpu)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = kids.ru_utime + kids.ru_stime - kids0.ru_utime - kids0.ru_stime
    client_others = max(0.0, cpu_busy_seconds(args.client_cpu) - client_core0 - client)
    for line in out.stdout.splitlines():
        if line.startswith("BENCHJSON "):
            data = json.loads(line[len("BENCHJSON ") :])
            return LoadResult(
                **data,
                server_cpu_s=cpu,
                others_cpu_s=others,
                client_cpu_s=client,
                client_others_cpu_s=client_others,
            )
    raise RuntimeError(f"load generator failed ({out.returncode}): {out.stdout}\n{out.stderr}")


def throughput(loadgen: str, args: Any) -> dict[str, dict[str, LoadResult]]:
    """Both servers run side by side (only one is under load at a time) so that the cases can
    be interleaved: a burst of load from elsewhere on the machine then hits both alike."""
    servers = [ServerProc(name, args.server_cpu) for name in args.servers]
    sessions: dict[str, str] = {}
    rounds: dict[tuple[str, str], list[LoadResult]] = {}
    try:
        for server in servers:
            server.start()
            with httpx.Client(timeout=10) as client:
                sessions[server.name] = open_session(client, server)
                for method in BODIES:
                    verify(client, server, sessions[server.name], method)
        for method in BODIES:
            for server in servers:
                print(f"  {server.name:12} {method:11} warm-up {args.warmup:g}s", flush=True)
                run_load(loadgen, server, sessions[server.name], method, args.warmup, args)
        for i in range(args.rounds):
            for method in BODIES:
                for server in servers:
                    wait_for_quiet(args)
                    r = run_load(loadgen, server, sessions[server.name], method, args.seconds, args)
                    rounds.setdefault((method, server.name), []).append(r)
                    print(
                        f"  {server.name:12} {method:11} timed {args.seconds:g}s #{i + 1}: "
                        f"{r.rps:,.0f} req/s, {r.errors} errors; server CPU {r.cpu_util:.0%} "
                        f"(+{r.others_util:.0%} other work), client CPU {r.client_util:.0%} "
                        f"(+{r.client_others_util:.0%} other work)",
                        flush=True,
                    )
    finally:
        for server in servers:
            server.stop()
    results: dict[str, dict[str, LoadResult]] = {}
    for (method, name), runs in rounds.items():
        # with several rounds, keep the one with the median req/s
        median = statistics.median_low(r.rps for r in runs)
        pick = next(r for r in runs if r.rps == median)
        pick.round_rps = [r.rps for r in runs]
        results.setdefault(method, {})[name] = pick
    return results


# -- idle-session memory -------------------------------------------------------------------


def create_sessions(server: ServerProc, count: int, concurrency: int) -> tuple[int, list[str]]:
    """POST initialize ``count`` times over ``concurrency`` raw keep-alive connections (httpx's
    pool is the bottleneck at 50 in flight); returns (sessions created, failures)."""
    body = json.dumps(INITIALIZE).encode()
    job = pyload.initialize_many(HOST, server.port, count, concurrency, body, server.token)
    return asyncio.run(job)


@dataclass
class MemoryResult:
    empty_rss: int
    warm_rss: int
    full_rss: int
    warm_sessions: int
    sessions: int
    failures: int
    first_failure: str
    extra_status: str
    seconds: float

    @property
    def delta_mb(self) -> float:
        return (self.full_rss - self.empty_rss) / 2**20

    @property
    def per_session(self) -> float:
        return (self.full_rss - self.empty_rss) / max(1, self.sessions)

    @property
    def marginal_per_session(self) -> float:
        return (self.full_rss - self.warm_rss) / max(1, self.sessions - self.warm_sessions)


def memory(args: Any) -> dict[str, MemoryResult]:
    results: dict[str, MemoryResult] = {}
    for name in args.memory_servers:
        server = ServerProc(name, args.server_cpu)
        server.start()
        try:
            time.sleep(1.0)
            empty = server.rss_bytes()
            warm_n = min(100, args.sessions)
            t0 = time.perf_counter()
            made1, fail1 = create_sessions(server, warm_n, args.session_concurrency)
            time.sleep(0.5)
            warm = server.rss_bytes()
            made2, fail2 = create_sessions(server, args.sessions - warm_n, args.session_concurrency)
            elapsed = time.perf_counter() - t0
            time.sleep(1.0)
            full = server.rss_bytes()
            # one more than the run made: shows what the server does at its session cap
            with httpx.Client(timeout=10) as client:
                r = client.post(server.url, json=INITIALIZE, headers=server.headers())
                extra = f"{r.status_code} {r.text[:160]}"
            failures = fail1 + fail2
            results[name] = MemoryResult(
                empty_rss=empty,
                warm_rss=warm,
                full_rss=full,
                warm_sessions=made1,
                sessions=made1 + made2,
                failures=len(failures),
                first_failure=failures[0] if failures else "",
                extra_status=extra,
                seconds=elapsed,
            )
            print(
                f"  {name:12} {made1 + made2:,} sessions in {elapsed:.1f}s, "
                f"RSS {empty / 2**20:.1f} -> {full / 2**20:.1f} MB",
                flush=True,
            )
        finally:
            server.stop()
    return results


# -- report --------------------------------------------------------------------------------


def paired_ratios(runs: list[float], reference: list[float]) -> list[float]:
    """Round i's req/s over the reference's round i (the rounds interleave every case, so
    the two ran back to back); empty when a round is missing or the reference served none."""
    if len(runs) != len(reference) or not all(reference):
        return []
    return [r / ref for r, ref in zip(runs, reference, strict=True)]


def report(
    tp: dict[str, dict[str, LoadResult]], mem: dict[str, MemoryResult], args: Any
) -> list[str]:
    lines: list[str] = []
    if tp:
        lines += [
            f"Throughput and latency ({args.connections} connections, {args.seconds:g} s per "
            f"case after {args.warmup:g} s warm-up; server on CPU {args.server_cpu}, "
            f"load generator on CPU {args.client_cpu})",
            "",
            "| method | server | req/s | rounds' req/s | p50 ms | p99 ms | errors | requests | "
            "server CPU (+other work) | client CPU (+other work) | req per server CPU-s |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for method, by_server in tp.items():
            for name, r in by_server.items():
                lines.append(
                    f"| {method} | {name} | {r.rps:,.0f} | "
                    f"{' / '.join(f'{x:,.0f}' for x in r.round_rps)} | {r.p50_us / 1000:.2f} | "
                    f"{r.p99_us / 1000:.2f} | {r.errors} | {r.requests:,} | "
                    f"{r.cpu_util:.0%} (+{r.others_util:.0%}) | {r.client_util:.0%} "
                    f"(+{r.client_others_util:.0%}) | {r.per_cpu_second:,.0f} |"
                )
        lines += [
            "",
            "Ratios: of the median rounds' req/s; and, paired, the median of the rounds' own "
            "ratios (round i of one server against round i of its reference, run minutes "
            "apart at most: a drift of the machine between rounds cancels out). The target "
            "is judged on the paired median.",
            "",
            "| method | ratio | req/s | paired rounds' ratios (median) | req per server CPU-s "
            "| p50 latency | target |",
            "|---|---|---:|---|---:|---:|---|",
        ]
        for method, by_server in tp.items():
            for name, a in by_server.items():
                if name.startswith("SDK"):
                    continue
                # each era against the SDK spoken to in the same era
                reference = "SDK-2026" if is_stateless(name) else "SDK"
                s = by_server.get(reference)
                if s is None or not s.rps:
                    continue
                ratio = a.rps / s.rps
                paired = paired_ratios(a.round_rps, s.round_rps)
                paired_median = statistics.median(paired) if paired else ratio
                target = "-"
                if method == "tools/call" and name in ("AppDeck", "AppDeck-2026"):
                    met = "MET" if paired_median >= 6 else "MISSED"
                    target = f">= 6x (issue 26): {met}"
                lines.append(
                    f"| {method} | {name}/{reference} | {ratio:.2f}x | "
                    f"{' / '.join(f'{x:.2f}' for x in paired)} (**{paired_median:.2f}x**) | "
                    f"{a.per_cpu_second / s.per_cpu_second:.2f}x | {a.p50_us / s.p50_us:.2f}x | "
                    f"{target} |"
                )
    if mem:
        lines += [
            "",
            f"Idle-session memory (VmRSS; {args.sessions:,} x initialize, "
            f"{args.session_concurrency} in flight, fresh server process)",
            "",
            "| server | empty MB | after sessions MB | sessions | MB above empty | "
            "bytes/session | marginal bytes/session | failures | one more initialize |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for name, m in mem.items():
            extra = m.extra_status.replace("|", "\\|").replace("\n", " ")
            lines.append(
                f"| {name} | {m.empty_rss / 2**20:.1f} | {m.full_rss / 2**20:.1f} | "
                f"{m.sessions:,} | {m.delta_mb:.1f} | {m.per_session:,.0f} | "
                f"{m.marginal_per_session:,.0f} | {m.failures} | {extra[:90]} |"
            )
        a = mem.get("AppDeck")
        if a is not None:
            scaled = a.delta_mb * 10_000 / max(1, a.sessions)
            verdict = "MET" if scaled < 100 and a.sessions == args.sessions else "MISSED"
            lines.append("")
            lines.append(
                f"AppDeck memory target (< 100 MB above empty for 10,000 sessions): "
                f"{scaled:.1f} MB -> {verdict}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="timed load per case")
    parser.add_argument("--warmup", type=float, default=3.0, help="warm-up load per case")
    parser.add_argument(
        "--rounds", type=int, default=3, help="timed runs per case, interleaved; the median counts"
    )
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions for memory")
    parser.add_argument("--session-concurrency", type=int, default=50)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run servers and load generator at this nice value (negative needs root); "
        "useful when other work shares the machine",
    )
    parser.add_argument("--loadgen", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=5.0,
        help="before each timed case, wait up to this long for both CPUs to be idle",
    )
    parser.add_argument(
        "--servers",
        type=lambda v: v.split(","),
        # traced and info: on demand
        default=[name for name in SERVERS if name not in ("AppDeck-traced", "AppDeck-info")],
        help=f"throughput servers, comma-separated (default {','.join(SERVERS)})",
    )
    parser.add_argument(
        "--memory-servers",
        type=lambda v: v.split(","),
        default=["AppDeck", "SDK"],
        help="servers for the memory part (default AppDeck,SDK)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help=f"another checkout (git worktree add DIR COMMIT): adds the throughput server "
        f"{BASELINE}, that checkout's AppDeck server, for a before/after in the same rounds",
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--json", type=Path, default=WORK / "results.json", help="raw results file")
    args = parser.parse_args()
    global NICE, BASELINE_DIR
    NICE = args.nice
    if args.baseline is not None:
        BASELINE_DIR = args.baseline.resolve()
        SERVERS[BASELINE] = (
            BASELINE_DIR / "bench" / "appdeck_server.py",
            ["--auth", "bearer"],
            True,
        )
        if BASELINE not in args.servers:
            args.servers.insert(args.servers.index("SDK") if "SDK" in args.servers else 0, BASELINE)
        if "AppDeck-2026" in args.servers:  # the same checkout in the stateless era too
            SERVERS[BASELINE_2026] = (
                BASELINE_DIR / "bench" / "appdeck_server.py",
                ["--auth", "bearer", "--stateless"],
                True,
            )
            if BASELINE_2026 not in args.servers:
                args.servers.insert(args.servers.index("AppDeck-2026") + 1, BASELINE_2026)
    unknown = {*args.servers, *args.memory_servers} - set(SERVERS)
    if unknown:
        parser.error(f"unknown server(s) {sorted(unknown)}; choose from {list(SERVERS)}")

    cpus = os.sched_getaffinity(0)
    if {args.server_cpu, args.client_cpu} - cpus or args.server_cpu == args.client_cpu:
        print(f"warning: need two distinct CPUs out of {sorted(cpus)}; pinning disabled")
        args.server_cpu = args.client_cpu = None
    else:
        os.sched_setaffinity(0, {args.client_cpu})  # this process's own clients stay off CPU 0

    loadgen = ensure_wrk(args.loadgen) if not args.skip_throughput else "-"
    env = environment(loadgen)
    print(
        f"{env['date']}  {env['nproc']} CPU ({env['cpu']}), Python {env['python']}, "
        + ", ".join(f"{k} {v}" for k, v in env["packages"].items())
        + f"; AppDeck {env['appdeck_git']}; load generator: {loadgen}",
        flush=True,
    )
    tp: dict[str, dict[str, LoadResult]] = {}
    mem: dict[str, MemoryResult] = {}
    if not args.skip_throughput:
        print("Throughput:", flush=True)
        tp = throughput(loadgen, args)
    if not args.skip_memory:
        print("Idle-session memory:", flush=True)
        mem = memory(args)
    lines = report(tp, mem, args)
    print()
    print("\n".join(lines))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    env["loadavg_end"] = Path("/proc/loadavg").read_text().strip()
    print(f"load average at start: {env['loadavg_start']}; at end: {env['loadavg_end']}")
    raw = {
        "environment": env,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "args": {k: str(v) for k, v in vars(args).items()},
        "throughput": {
            m: {
                n: {
                    **asdict(r),
                    "rps": r.rps,
                    "errors": r.errors,
                    "cpu_util": r.cpu_util,
                    "others_util": r.others_util,
                    "client_util": r.client_util,
                    "client_others_util": r.client_others_util,
                    "per_cpu_second": r.per_cpu_second,
                }
                for n, r in by.items()
            }
            for m, by in tp.items()
        },
        "memory": {
            n: {
                **asdict(m),
                "delta_mb": m.delta_mb,
                "per_session": m.per_session,
                "marginal_per_session": m.marginal_per_session,
            }
            for n, m in mem.items()
        },
        "report": lines,
    }
    args.json.write_text(json.dumps(raw, indent=2))
    shown = args.json.relative_to(ROOT) if args.json.is_relative_to(ROOT) else args.json
    print(f"\nraw results: {shown}")


if __name__ == "__main__":
    main()
