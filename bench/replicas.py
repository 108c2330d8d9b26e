"""AppDeck as replicas behind one URL (issue 13): what Redis costs one replica, how 1 -> 2 -> 3
replicas scale on this machine, and notification latency through Redis.

On loopback with a real PostgreSQL (a fresh database per case, created and dropped here, with the
``<name>_apps`` database AppDeck creates beside it) and a real Redis (a fresh key prefix per
case, its keys deleted afterwards). Servers are
``bench/appdeck_server.py`` (``Services.start`` + an ``echo`` tool, bearer auth as ``appdeck
serve`` runs it), started through ``bench/run.py``'s ``ServerProc`` with the settings in the
environment; the load is ``wrk`` with ``run.py``'s Lua script (every response must be a 200 with
a JSON-RPC result).

1. **One replica, Redis vs in-process**: ``tools/call`` echo, ``--connections`` connections.
   ``in-process`` = PostgreSQL, no Redis (in-memory bus and rate-limit buckets); ``replica`` =
   replica mode (``APPDECK_REDIS_URL`` + ``APPDECK_DATABASE_URL`` + ``APPDECK_SECRET_KEY``),
   the rate limit leasing tokens (issue 26); ``replica, no lease`` = the same with
   ``APPDECK_RATE_LIMIT_LEASE_SECONDS=0`` (one round trip per call, as before issue 26).
   The server is pinned to ``--server-cpu``, wrk to ``--client-cpu`` (as in ``run.py``);
   PostgreSQL and Redis float. Reported: req/s, p50, p99 and Redis commands per call from
   ``INFO commandstats`` (a global counter: it includes the commands a Lua script runs inside
   Redis and any other client of this Redis). A ``MONITOR`` sample of ``--monitor-calls``
   sequential calls then counts the replica's real round trips per call (commands sent on its
   own connections, found with ``ss``) apart from the commands run inside scripts.
2. **1 -> 2 -> 3 replicas** in replica mode, all unpinned (they share every core), one database
   and prefix, one session opened on the first replica and used on every replica (no sticky
   sessions; the first replica's token too). Load spread evenly: one wrk per replica, the
   ``--connections`` split between them, every wrk pinned to ``--client-cpu``. Reported: total
   req/s, p50 (median of the wrks) and p99 (worst wrk), server CPU-seconds per 1,000 calls per
   process (``/proc/<pid>/stat`` utime + stime), and where the machine's CPU went (servers,
   wrk, Redis, PostgreSQL, the rest).
3. ``bench/stream_latency.py`` (notification latency A -> C through Redis at 100 and 1,000
   events/s; replay of 1k / 10k events), its output included as is.

Per case a warm-up, then ``--rounds`` interleaved runs of ``--seconds``; the median run (by
req/s) is reported. Before each run it waits (up to ``--quiet-wait`` s) for both CPUs to be idle.

    .venv/bin/python bench/replicas.py                 # ~3 minutes
    .venv/bin/python bench/replicas.py --seconds 1 --rounds 1 --warmup 0.5   # smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import run
from redis import Redis
from run import BENCH, HOST, ROOT, WORK, WRK_LUA, LoadResult, ServerProc

ECHO = run.BODIES["tools/call"]
NO_LEASE = "replica, no lease (1 round trip per call)"
PUBLIC_URL = "http://127.0.0.1:18700"
"""The balancer's URL every replica is told (issuer and audience of the tokens); no balancer
listens there: each wrk talks to its replica directly."""


# -- PostgreSQL and Redis --------------------------------------------------------------------


def admin_dsn(base: str) -> str:
    """asyncpg's spelling of ``--postgres`` for the ``postgres`` maintenance database."""
    return base.replace("postgresql+asyncpg://", "postgresql://", 1).rstrip("/") + "/postgres"


def pg_execute(base: str, sql: str) -> None:
    async def go() -> None:
        conn = await asyncpg.connect(admin_dsn(base))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


def create_database(base: str) -> str:
    name = f"appdeck_bench_{uuid.uuid4().hex[:10]}"
    pg_execute(base, f'CREATE DATABASE "{name}"')
    return name


def drop_database(base: str, name: str) -> None:
    """``name`` and the apps database AppDeck creates beside it (``<name>_apps``)."""
    for db in (name, f"{name}_apps"):
        pg_execute(base, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def delete_prefix(redis: Redis, prefix: str) -> int:
    keys = list(redis.scan_iter(match=f"{prefix}:*", count=1000))
    for i in range(0, len(keys), 500):
        redis.delete(*keys[i : i + 500])
    return len(keys)


def redis_commands(redis: Redis) -> dict[str, int]:
    """Calls per command so far (``INFO commandstats``)."""
    info: dict[str, Any] = redis.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def redis_cpu(redis: Redis) -> float:
    info: dict[str, Any] = redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu() -> dict[int, float]:
    """utime + stime of every process named ``postgres`` (the server and its backends)."""
    out: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = stat.read_text()
            if text[text.index("(") + 1 : text.rindex(")")] == "postgres":
                out[int(stat.parent.name)] = process_cpu(int(stat.parent.name))
    return out


def postgres_cpu_since(before: dict[int, float]) -> float:
    """PostgreSQL's CPU time since ``before``: backends that exited meanwhile are left out, new
    ones count from zero."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in postgres_cpu().items())


def machine_busy() -> float:
    return sum(run.cpu_busy_seconds(c) for c in range(os.cpu_count() or 1))


# -- servers ---------------------------------------------------------------------------------


@dataclass
class Backend:
    """One set of settings (a fresh database, and a fresh Redis prefix in replica mode)."""

    label: str
    database: str
    prefix: str | None
    env: dict[str, str]
    servers: list[ServerProc] = field(default_factory=list)
    session: str = ""


def backend_env(args: argparse.Namespace, database: str, prefix: str | None) -> dict[str, str]:
    env = {
        "APPDECK_DATABASE_URL": f"{args.postgres.rstrip('/')}/{database}",
        "APPDECK_SECRET_KEY": args.secret,
        "APPDECK_PUBLIC_URL": PUBLIC_URL,
        "APPDECK_INGRESS_PORT": "0",  # several servers on one host
    }
    if prefix is not None:
        env |= {"APPDECK_REDIS_URL": args.redis, "APPDECK_REDIS_PREFIX": prefix}
    return env


@contextlib.contextmanager
def environ(env: dict[str, str]) -> Iterator[None]:
    """``env`` (and no other APPDECK_* setting) in this process's environment, which the
    server processes started inside inherit."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("APPDECK_")]:
        del os.environ[key]
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def start_backend(backend: Backend, replicas: int, cpu: int | None) -> None:
    """Start the replicas one after the other, open one session on the first and check an
    echo call on every replica with that session and the first replica's token."""
    with environ(backend.env):
        for _ in range(replicas):
            server = ServerProc("AppDeck", cpu)
            backend.servers.append(server)
            server.start()
    first = backend.servers[0]
    for server in backend.servers[1:]:
        server.token = first.token
    with httpx.Client(timeout=10) as client:
        backend.session = run.open_session(client, first)
        for server in backend.servers:
            run.verify(client, server, backend.session, "tools/call")


def stop_backend(backend: Backend, args: argparse.Namespace, redis: Redis) -> None:
    for server in backend.servers:
        server.stop()
    with contextlib.suppress(Exception):
        drop_database(args.postgres, backend.database)
    if backend.prefix is not None:
        delete_prefix(redis, backend.prefix)


# -- load ------------------------------------------------------------------------------------

_next_id = 0


def wrk_command(
    server: ServerProc, session: str, connections: int, seconds: float, cpu: int | None
) -> list[str]:
    """One wrk over ``connections`` connections to ``server``, with ids of its own."""
    global _next_id
    _next_id += 100_000_000
    script = WORK / f"replicas-{server.port}-{_next_id}.lua"
    script.write_text(
        WRK_LUA
        % {
            "mcp_headers": "".join(
                f'\n  ["{k}"] = "{v}",'
                for k, v in run.case_headers(server.name, "tools/call", session).items()
            ),
            "auth": f'\n  ["Authorization"] = "Bearer {server.token}",' if server.token else "",
            "body": ECHO,
            "id_base": _next_id,
        }
    )
    return [
        *run.taskset(cpu),
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        f"http://{HOST}:{server.port}/mcp",
    ]


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def parse_wrk(proc: subprocess.CompletedProcess[str]) -> LoadResult:
    for line in proc.stdout.splitlines():
        if line.startswith("BENCHJSON "):
            return LoadResult(**json.loads(line[len("BENCHJSON ") :]))
    raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")


@dataclass
class Run:
    """One timed run over one or more replicas at once."""

    per_replica: list[LoadResult]
    server_cpu_s: list[float]
    idle_servers_cpu_s: float
    redis_calls: dict[str, int]
    redis_cpu_s: float
    postgres_cpu_s: float
    wrk_cpu_s: float
    machine_busy_s: float
    wall_s: float

    @property
    def requests(self) -> int:
        return sum(r.requests for r in self.per_replica)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.per_replica)

    @property
    def rps(self) -> float:
        return sum(r.rps for r in self.per_replica)

    @property
    def p50_ms(self) -> float:
        return statistics.median(r.p50_us for r in self.per_replica) / 1000

    @property
    def p99_ms(self) -> float:
        return max(r.p99_us for r in self.per_replica) / 1000

    @property
    def redis_per_call(self) -> float:
        return sum(self.redis_calls.values()) / max(1, self.requests)

    def per_1k(self, cpu_s: float) -> float:
        return cpu_s / max(1, self.requests) * 1000

    def replica_per_1k(self) -> list[float]:
        return [
            cpu / max(1, r.requests) * 1000
            for cpu, r in zip(self.server_cpu_s, self.per_replica, strict=True)
        ]


def load(
    backend: Backend, replicas: int, seconds: float, args: argparse.Namespace, redis: Redis
) -> Run:
    """``replicas`` wrks at once, one per replica, the connections split between them."""
    loaded, idle = backend.servers[:replicas], backend.servers[replicas:]
    cmds = [
        wrk_command(s, backend.session, c, seconds, args.client_cpu)
        for s, c in zip(loaded, split(args.connections, replicas), strict=True)
    ]
    cpu0 = [s.cpu_seconds() for s in loaded]
    idle0 = sum(s.cpu_seconds() for s in idle)
    calls0, rcpu0, pg0 = redis_commands(redis), redis_cpu(redis), postgres_cpu()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, t0 = machine_busy(), time.monotonic()
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds
    ]
    outs = []
    for p, cmd in zip(procs, cmds, strict=True):
        out, err = p.communicate()
        outs.append(subprocess.CompletedProcess(cmd, p.returncode, out, err))
        Path(cmd[-2]).unlink(missing_ok=True)  # the Lua script
    wall, busy = time.monotonic() - t0, machine_busy() - busy0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    calls1 = redis_commands(redis)
    return Run(
        per_replica=[parse_wrk(o) for o in outs],
        server_cpu_s=[s.cpu_seconds() - c for s, c in zip(loaded, cpu0, strict=True)],
        idle_servers_cpu_s=sum(s.cpu_seconds() for s in idle) - idle0,
        redis_calls={
            k: v - calls0.get(k, 0) for k, v in calls1.items() if v - calls0.get(k, 0) > 0
        },
        redis_cpu_s=redis_cpu(redis) - rcpu0,
        postgres_cpu_s=postgres_cpu_since(pg0),
        wrk_cpu_s=kids.ru_utime + kids.ru_stime - kids0.ru_utime - kids0.ru_stime,
        machine_busy_s=busy,
        wall_s=wall,
    )


def wait_quiet(limit: float) -> None:
    """Wait up to ``limit`` s until the machine is >= 90 % idle over one second."""
    deadline = time.monotonic() + limit
    while True:
        before = machine_busy()
        time.sleep(1.0)
        busy = machine_busy() - before
        if busy < 0.1 * (os.cpu_count() or 1):
            return
        if time.monotonic() > deadline:
            print(f"    (the machine is still {busy:.1f} CPU busy with other work; going on)")
            return


def median_run(runs: list[Run]) -> Run:
    ranked = sorted(runs, key=lambda r: r.rps)
    return ranked[(len(ranked) - 1) // 2]


def rounds(
    cases: list[tuple[str, Backend, int]], args: argparse.Namespace, redis: Redis
) -> dict[str, tuple[Run, list[float]]]:
    """Warm-up, then ``--rounds`` interleaved timed runs of every case; the median per case."""
    for label, backend, replicas in cases:
        print(f"  {label:24} warm-up {args.warmup:g}s", flush=True)
        load(backend, replicas, args.warmup, args, redis)
    runs: dict[str, list[Run]] = {}
    for i in range(args.rounds):
        for label, backend, replicas in cases:
            wait_quiet(args.quiet_wait)
            r = load(backend, replicas, args.seconds, args, redis)
            runs.setdefault(label, []).append(r)
            print(
                f"  {label:24} #{i + 1}: {r.rps:,.0f} req/s, {r.errors} errors, "
                f"p50 {r.p50_ms:.2f} ms, p99 {r.p99_ms:.2f} ms, "
                f"Redis {r.redis_per_call:.2f} commands/call",
                flush=True,
            )
    return {k: (median_run(v), [r.rps for r in v]) for k, v in runs.items()}


# -- round trips (MONITOR) -------------------------------------------------------------------

MONITOR_LINE = re.compile(r'^\d+\.\d+ \[\d+ ([^\]]+)\] "([^"]+)"')


def redis_ports(pid: int, redis_port: int) -> set[str]:
    """``127.0.0.1:<port>`` of every connection from ``pid`` to Redis (``ss -tnp``)."""
    out = subprocess.run(
        ["ss", "-tnpH", f"( dport = :{redis_port} )"], capture_output=True, text=True, check=False
    ).stdout
    return {line.split()[3] for line in out.splitlines() if f"pid={pid}," in line}


def monitor_round_trips(
    backend: Backend, calls: int, redis_url: str
) -> dict[str, float | dict[str, int]]:
    """Sequential echo calls under ``redis-cli monitor``: the commands the replica sends on its
    own connections (round trips) and the commands its scripts run inside Redis, per call."""
    server = backend.servers[0]
    assert server.proc is not None
    mine = redis_ports(server.proc.pid, urlsplit(redis_url).port or 6379)
    log = WORK / "replicas-monitor.txt"
    with log.open("w") as out:
        monitor = subprocess.Popen(["redis-cli", "-u", redis_url, "monitor"], stdout=out)
        try:
            time.sleep(0.5)
            with httpx.Client(timeout=10) as client:
                headers = server.headers(backend.session)
                for n in range(calls):
                    r = client.post(server.url, content=ECHO % (900_000_000 + n), headers=headers)
                    r.raise_for_status()
            time.sleep(0.5)
        finally:
            monitor.terminate()
            monitor.wait(5)
    sent: dict[str, int] = {}
    scripted: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = MONITOR_LINE.match(line)
        if m is None:
            continue
        source, command = m.group(1).split()[-1], m.group(2).lower()
        if source == "lua":
            scripted[command] = scripted.get(command, 0) + 1
        elif source in mine:
            sent[command] = sent.get(command, 0) + 1
    # the script lines cannot be told apart by client; only the replica's scripts run here
    return {
        "calls": calls,
        "round_trips_per_call": sum(sent.values()) / calls,
        "in_script_per_call": sum(scripted.values()) / calls,
        "sent": sent,
        "in_script": scripted,
    }


# -- the three parts -------------------------------------------------------------------------


def new_backend(args: argparse.Namespace, label: str, replica_mode: bool) -> Backend:
    database = create_database(args.postgres)
    prefix = f"bench{uuid.uuid4().hex[:8]}" if replica_mode else None
    return Backend(label, database, prefix, backend_env(args, database, prefix))


def part_one(args: argparse.Namespace, redis: Redis) -> dict[str, Any]:
    inproc = new_backend(args, "in-process", replica_mode=False)
    replica = new_backend(args, "replica", replica_mode=True)
    # the limiter before issue 26 §2: one Redis round trip per call
    no_lease = new_backend(args, "replica, no lease", replica_mode=True)
    no_lease.env["APPDECK_RATE_LIMIT_LEASE_SECONDS"] = "0"
    backends = [inproc, replica, no_lease]
    try:
        for backend in backends:
            start_backend(backend, 1, args.server_cpu)
        cases = [
            ("in-process (PG)", inproc, 1),
            ("replica (PG + Redis)", replica, 1),
            (NO_LEASE, no_lease, 1),
        ]
        results = rounds(cases, args, redis)
        monitor = monitor_round_trips(replica, args.monitor_calls, args.redis)
    finally:
        for backend in backends:
            stop_backend(backend, args, redis)
    return {"results": results, "monitor": monitor}


def part_two(args: argparse.Namespace, redis: Redis) -> dict[str, Any]:
    backend = new_backend(args, "replicas", replica_mode=True)
    try:
        start_backend(backend, args.max_replicas, None)
        cases = [(f"{n} replica(s)", backend, n) for n in range(1, args.max_replicas + 1)]
        results = rounds(cases, args, redis)
    finally:
        stop_backend(backend, args, redis)
    return {"results": results}


def part_three(args: argparse.Namespace) -> str:
    cmd = [
        sys.executable,
        str(BENCH / "stream_latency.py"),
        "--redis",
        args.redis,
        "--seconds",
        f"{args.stream_seconds:g}",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if out.returncode != 0:
        return f"stream_latency.py failed ({out.returncode}): {out.stderr[-2000:]}"
    return out.stdout.strip()


# -- report ----------------------------------------------------------------------------------


def report_one(part: dict[str, Any]) -> list[str]:
    lines = [
        "| one replica | req/s | rounds' req/s | p50 ms | p99 ms | errors | "
        "Redis commands per call (commandstats) | server CPU-s per 1k calls | x in-process |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    base = part["results"]["in-process (PG)"][0].replica_per_1k()[0]
    for label, (r, all_rps) in part["results"].items():
        lines.append(
            f"| {label} | {r.rps:,.0f} | {' / '.join(f'{x:,.0f}' for x in all_rps)} | "
            f"{r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.errors} | {r.redis_per_call:.2f} | "
            f"{r.replica_per_1k()[0]:.3f} | {r.replica_per_1k()[0] / base:.2f}x |"
        )
    replica = part["results"]["replica (PG + Redis)"][0]
    per_cmd = ", ".join(
        f"{k} {v / max(1, replica.requests):.2f}"
        for k, v in sorted(replica.redis_calls.items(), key=lambda kv: -kv[1])
        if v / max(1, replica.requests) >= 0.01
    )
    m = part["monitor"]
    lines += [
        "",
        f"Redis commands per call under load (replica mode, commandstats): {per_cmd}",
        f"MONITOR, {m['calls']} sequential calls: {m['round_trips_per_call']:.2f} round trips "
        f"per call from the replica ({m['sent']}), {m['in_script_per_call']:.2f} commands per "
        f"call run inside scripts ({m['in_script']})",
    ]
    return lines


def report_two(part: dict[str, Any]) -> list[str]:
    lines = [
        "| replicas | total req/s | rounds' req/s | x one replica | p50 ms | p99 ms (worst wrk) | "
        "errors | server CPU-s per 1k calls, per process | all servers | wrk | Redis | "
        "PostgreSQL | machine busy (of 2 cores) |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    base = None
    for label, (r, all_rps) in part["results"].items():
        base = base or r.rps
        servers = sum(r.server_cpu_s) + r.idle_servers_cpu_s
        lines.append(
            f"| {label.split()[0]} | {r.rps:,.0f} | {' / '.join(f'{x:,.0f}' for x in all_rps)} | "
            f"{r.rps / base:.2f}x | {r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.errors} | "
            f"{' / '.join(f'{x:.3f}' for x in r.replica_per_1k())} | {r.per_1k(servers):.3f} | "
            f"{r.per_1k(r.wrk_cpu_s):.3f} | {r.per_1k(r.redis_cpu_s):.3f} | "
            f"{r.per_1k(r.postgres_cpu_s):.3f} | {r.machine_busy_s / r.wall_s:.2f} |"
        )
    return lines


def to_json(part: dict[str, Any]) -> dict[str, Any]:
    out = dict(part)
    out["results"] = {
        k: {**asdict(r), "rps": r.rps, "rounds_rps": rps} for k, (r, rps) in part["results"].items()
    }
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=6.0, help="timed load per case")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up load per case")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs; median counts")
    parser.add_argument("--connections", type=int, default=20, help="in all, split per replica")
    parser.add_argument("--max-replicas", type=int, default=3)
    parser.add_argument("--server-cpu", type=int, default=0, help="part 1's server")
    parser.add_argument("--client-cpu", type=int, default=1, help="every wrk")
    parser.add_argument("--quiet-wait", type=float, default=5.0)
    parser.add_argument("--monitor-calls", type=int, default=200)
    parser.add_argument("--stream-seconds", type=float, default=5.0, help="stream_latency.py")
    parser.add_argument(
        "--postgres",
        default="postgresql+asyncpg://postgres@127.0.0.1:5432",
        help="server URL without a database (one is created and dropped per case)",
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run, e.g. 1,3")
    parser.add_argument("--json", type=Path, default=WORK / "replicas.json", help="raw results")
    args = parser.parse_args()
    args.secret = secrets.token_urlsafe(32)
    return args


def main() -> None:
    args = parse_args()
    parts = {p.strip() for p in args.parts.split(",")}
    if run.ensure_wrk("wrk") != "wrk":
        sys.exit("wrk is required")
    WORK.mkdir(exist_ok=True)
    env = run.environment("wrk")
    env["postgres"] = args.postgres
    print(
        f"{env['date']}  {env['nproc']} CPU ({env['cpu']}), Python {env['python']}; "
        f"AppDeck {env['appdeck_git']}; load average {env['loadavg_start']}",
        flush=True,
    )
    redis = Redis.from_url(args.redis)
    env["redis"] = str(redis.info("server")["redis_version"])
    lines: list[str] = []
    raw: dict[str, Any] = {"environment": env, "command": " ".join(sys.argv)}
    if "1" in parts:
        print("1. One replica, in-process vs replica mode:", flush=True)
        one = part_one(args, redis)
        lines += ["", *report_one(one)]
        raw["one_replica"] = to_json(one)
    if "2" in parts:
        print(f"2. 1 -> {args.max_replicas} replicas (replica mode, unpinned):", flush=True)
        two = part_two(args, redis)
        lines += ["", *report_two(two)]
        raw["scaling"] = to_json(two)
    if "3" in parts:
        print("3. bench/stream_latency.py:", flush=True)
        stream = part_three(args)
        lines += ["", "bench/stream_latency.py:", "", *stream.splitlines()]
        raw["stream_latency"] = stream
    env["loadavg_end"] = Path("/proc/loadavg").read_text().strip()
    raw["report"] = lines
    args.json.write_text(json.dumps(raw, indent=2, default=str))
    print("\n".join(lines))
    print(f"\nload average at start: {env['loadavg_start']}; at end: {env['loadavg_end']}")
    print(f"raw results: {args.json}")
    redis.close()


if __name__ == "__main__":
    main()
