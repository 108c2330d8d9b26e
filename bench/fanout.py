"""Fan-out of ``notifications/resources/updated`` to many subscribers (issue 26 §4), AppDeck
beside the official MCP Python SDK in the same run.

Each server runs in its own process pinned to CPU 0; this process (the subscribers) runs on
CPU 1. ``--subscribers`` sessions (MCP 2025-11-25, bearer auth on AppDeck as ``appdeck serve``
runs it) each open their standalone GET stream and subscribe to one resource
(``appdeck://apps`` on AppDeck, ``bench://watched`` on the SDK). Then, ``--updates`` times,
one more session calls a bench-only tool, ``touch``, whose handler tells the subscribers
that the resource changed:

- AppDeck: ``ResourcesFeature.updated(uri, tenant=...)``, the path a platform change takes
  (``Services._announce``): the session store's followers, the hub (event log, then the bus),
  each GET stream's reader;
- SDK: ``await session.send_resource_updated(uri)`` for every session that subscribed, in
  turn (what an SDK server does: the SDK keeps no subscriptions).

Per update, every subscriber must receive the notification exactly once (each GET stream's
bytes are searched for it, on a raw socket per stream). A delivery's time is the kernel's
receive time of the read that carried it (``SO_TIMESTAMPNS``), so the subscribers' own
process adds nothing to the spread. Figures per update, from the moment the ``touch`` request
is written: the first and the last delivery, the p50 and p99 delivery over the subscribers,
and the **spread** (last minus first delivery). Reported: the median over the updates, per
server, and the machine's load; and the server's CPU time per update (user + system, all its
threads, from ``/proc``, over the updates and the pauses between them): a figure the other
processes on the machine hardly move, unlike the delivery times. ``--baseline DIR`` adds ``AppDeck-base``: the same server on another checkout's
``src`` (a ``git worktree`` of an older commit) in the same rounds, for before/after.

AppDeck's per-user and per-token session caps (100 and 50 by default) and its connections per
client address (256) are raised to fit the subscribers (all on loopback); everything else is
``appdeck serve``'s defaults (the embedded SQLite log and in-process bus).

    .venv/bin/python bench/fanout.py [--subscribers 1000] [--updates 15] [--rounds 3]
    .venv/bin/python bench/fanout.py --baseline /tmp/appdeck-main   # before/after
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import orjson

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
HOST = "127.0.0.1"
PROTOCOL = "2025-11-25"
MARK = b"notifications/resources/updated"
APPDECK_URI = "appdeck://apps"
SDK_URI = "bench://watched"
TOUCH_SCHEMA = {"type": "object", "properties": {}}
DELIVERY_WITHIN_S = 20.0
SERVER_CPU, CLIENT_CPU = 0, 1


# -- the servers (run as ``fanout.py --serve appdeck|sdk``) ---------------------------------


def serve_appdeck(port: int, token_file: Path, subscribers: int) -> None:
    import uvloop

    sys.path.insert(0, str(BENCH))
    from appdeck_server import mint_dev_token, uvicorn_config

    from appdeck import logs
    from appdeck.app import Services
    from appdeck.cli.serve import server_class
    from appdeck.protocol.registry import ToolDef
    from appdeck.settings import Settings
    from appdeck.tuning import tune_gc

    async def main(data_dir: Path) -> None:
        settings = Settings(
            host=HOST,
            port=port,
            data_dir=data_dir,
            log_level="warning",
            max_sessions_per_user=subscribers + 10,
            max_sessions_per_token=subscribers + 10,
            max_connections_per_ip=subscribers + 100,
            rate_limit_per_second=1e9,
            rate_limit_burst=10**9,
        )
        logs.configure(settings.log_level, settings.log_format)
        services = await Services.start(settings, port=port)
        resources = services.server.resources

        async def touch(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
            await resources.updated(APPDECK_URI, tenant="dev")
            return {"content": [{"type": "text", "text": "touched"}]}

        services.registry.add_tool(
            ToolDef(name="touch", description="touch", input_schema=TOUCH_SCHEMA, handler=touch)
        )
        token = await mint_dev_token(services)
        token_file.with_suffix(".tmp").write_text(token)
        token_file.with_suffix(".tmp").replace(token_file)
        config = uvicorn_config(services, settings)
        config.host, config.port = HOST, port
        tune_gc()
        try:
            # as appdeck serve: SIGTERM ends serving only, so the stop below runs
            await server_class(services.drain)(config).serve()
        finally:
            await services.stop(stop_apps=True)

    with tempfile.TemporaryDirectory(prefix="appdeck-bench-fanout-") as tmp:
        uvloop.run(main(Path(tmp)))


def serve_sdk(port: int, token_file: Path) -> None:
    import mcp.types as types
    import uvicorn
    from mcp.server import Server

    followers: dict[int, Any] = {}

    async def list_tools(ctx: Any, params: object) -> types.ListToolsResult:
        tool = types.Tool(name="touch", description="touch", input_schema=TOUCH_SCHEMA)
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        for session in list(followers.values()):
            await session.send_resource_updated(SDK_URI)
        return types.CallToolResult(content=[types.TextContent(type="text", text="touched")])

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        followers[id(ctx.session)] = ctx.session
        return types.EmptyResult()

    server = Server(
        "fanout-bench",
        version="0.0.1",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscribe_resource=subscribe,
    )
    app = server.streamable_http_app(
        streamable_http_path="/mcp", json_response=True, stateless_http=False
    )
    token_file.write_text("")
    uvicorn.run(
        app,  # type: ignore[arg-type]
        host=HOST,
        port=port,
        http="httptools",
        loop="uvloop",
        access_log=False,
        log_config=None,
        log_level="warning",
        lifespan="on",
        server_header=False,
    )


# -- the subscribers ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    name: str
    baseline: Path | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    token: str = ""

    @property
    def uri(self) -> str:
        return SDK_URI if self.name == "SDK" else APPDECK_URI

    def start(self, subscribers: int, work: Path) -> None:
        token_file = work / f"{self.name}.token"
        kind = "sdk" if self.name == "SDK" else "appdeck"
        env = {**os.environ, "APPDECK_INGRESS_PORT": "0"}
        if self.baseline is not None:
            env["PYTHONPATH"] = str(self.baseline / "src")
        cmd = ["taskset", "-c", str(SERVER_CPU), sys.executable, __file__, "--serve", kind]
        cmd += ["--port", str(self.port), "--token-file", str(token_file)]
        cmd += ["--subscribers", str(subscribers)]
        log = (work / f"{self.name}.log").open("wb")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {work / (self.name + '.log')}")
            if token_file.exists():
                with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 0.2):
                    self.token = token_file.read_text().strip()
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                print(f"{self.name} killed: its HAProxy may still run", file=sys.stderr)

    def headers(self, session: str | None = None) -> dict[str, str]:
        out = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if self.token:
            out["authorization"] = f"Bearer {self.token}"
        if session:
            out["mcp-session-id"] = session
            out["mcp-protocol-version"] = PROTOCOL
        return out


def _json_of(response: httpx.Response) -> Any:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return orjson.loads(line[5:])
        raise RuntimeError(f"no data in {response.text[:200]}")
    return response.json()


async def _rpc(
    client: httpx.AsyncClient, server: Server, session: str, method: str, params: Any
) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    url = f"http://{HOST}:{server.port}/mcp"
    r = await client.post(url, json=body, headers=server.headers(session))
    if r.status_code != 200:
        raise RuntimeError(f"{server.name} {method}: {r.status_code} {r.text[:300]}")
    message = _json_of(r)
    if "result" not in message:
        raise RuntimeError(f"{server.name} {method}: {message}")
    return message["result"]


async def _open_session(client: httpx.AsyncClient, server: Server) -> str:
    client_info = {"name": "fanout-bench", "version": "1"}
    init = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": client_info}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
    r = await client.post(f"http://{HOST}:{server.port}/mcp", json=body, headers=server.headers())
    session = r.headers.get("mcp-session-id")
    if r.status_code != 200 or not session:
        raise RuntimeError(f"{server.name} initialize: {r.status_code} {r.text[:300]}")
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = await client.post(
        f"http://{HOST}:{server.port}/mcp", json=note, headers=server.headers(session)
    )
    if r.status_code != 202:
        raise RuntimeError(f"{server.name} initialized: {r.status_code}")
    return session


class Tally:
    """Notifications received over every stream; set when ``target`` were."""

    def __init__(self) -> None:
        self.count = 0
        self.target = 0
        self.reached = asyncio.Event()

    def add(self, n: int) -> None:
        self.count += n
        if self.count >= self.target:
            self.reached.set()


SO_TIMESTAMPNS: Final = 35
"""Linux's socket option (``asm-generic/socket.h``; Python has no name for it): every read
carries the kernel's receive time (CLOCK_REALTIME) as ancillary data."""
_TIMESPEC: Final = struct.Struct("qq")


class Stream:
    """One session's GET stream on a raw socket: when each notification *arrived* (the
    kernel's receive time of the read that carried it), not when this process got round to
    it: 1,000 streams read by one Python process would add its own spread."""

    def __init__(self, sock: socket.socket, tally: Tally) -> None:
        self.sock = sock
        self.tally = tally
        self.seen: list[float] = []
        self.head = b""
        self.tail = b""
        self.opened = asyncio.get_running_loop().create_future()

    def readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(_TIMESPEC.size))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            data, ancillary = b"", []
            self.head += repr(exc).encode()
        now = time.time()
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                seconds, nanos = _TIMESPEC.unpack(value[: _TIMESPEC.size])
                now = seconds + nanos / 1e9
        if not data:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            if not self.opened.done():
                self.opened.set_exception(RuntimeError(f"GET stream closed: {self.head[:300]!r}"))
            return
        if not self.opened.done():
            self.head += data
            if b"\r\n\r\n" not in self.head:
                return
            status = self.head.split(b" ", 2)[1]
            if status != b"200":
                self.opened.set_exception(RuntimeError(f"GET stream: {self.head[:200]!r}"))
                return
            self.opened.set_result(None)
            data = self.head.partition(b"\r\n\r\n")[2]
        chunk = self.tail + data
        found = chunk.count(MARK)
        if found:
            self.seen.extend([now] * found)
            self.tally.add(found)
        self.tail = chunk[-(len(MARK) - 1) :]

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()


async def _listen(server: Server, session: str, tally: Tally) -> Stream:
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    await loop.sock_connect(sock, (HOST, server.port))
    head = [
        "GET /mcp HTTP/1.1",
        f"host: {HOST}:{server.port}",
        "accept: text/event-stream",
        f"mcp-session-id: {session}",
        f"mcp-protocol-version: {PROTOCOL}",
    ]
    if server.token:
        head.append(f"authorization: Bearer {server.token}")
    await loop.sock_sendall(sock, ("\r\n".join(head) + "\r\n\r\n").encode())
    stream = Stream(sock, tally)
    loop.add_reader(sock.fileno(), stream.readable)
    async with asyncio.timeout(30):
        await stream.opened
    return stream


@dataclass
class Figures:
    first: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)
    spread: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(server: Server, subscribers: int, updates: int, figures: Figures) -> None:
    limits = httpx.Limits(max_connections=20, max_keepalive_connections=20)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        gate = asyncio.Semaphore(20)
        tally = Tally()

        async def subscriber() -> Stream:
            async with gate:
                session = await _open_session(client, server)
                stream = await _listen(server, session, tally)
                await _rpc(client, server, session, "resources/subscribe", {"uri": server.uri})
                return stream

        streams = await asyncio.gather(*(subscriber() for _ in range(subscribers)))
        caller = await _open_session(client, server)
        call = {"name": "touch", "arguments": {}}
        await asyncio.sleep(0.5)
        assert server.proc is not None
        cpu_before = _cpu_seconds(server.proc.pid)
        try:
            for n in range(1, updates + 1):
                tally.target = n * subscribers
                tally.reached.clear()
                begin = time.time()  # the kernel's receive times are CLOCK_REALTIME
                await _rpc(client, server, caller, "tools/call", call)
                async with asyncio.timeout(DELIVERY_WITHIN_S):
                    await tally.reached.wait()
                if any(len(s.seen) != n for s in streams):
                    raise RuntimeError(f"{server.name}: a subscriber got a notification twice")
                times = sorted((s.seen[n - 1] - begin) * 1000 for s in streams)
                q = statistics.quantiles(times, n=100)
                figures.first.append(times[0])
                figures.p50.append(q[49])
                figures.p99.append(q[98])
                figures.last.append(times[-1])
                figures.spread.append(times[-1] - times[0])
                await asyncio.sleep(0.3)
            figures.cpu.append((_cpu_seconds(server.proc.pid) - cpu_before) / updates * 1000)
        finally:
            for s in streams:
                s.close()


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    args = _arguments()
    if args.serve == "appdeck":
        serve_appdeck(args.port, args.token_file, args.subscribers)
    elif args.serve == "sdk":
        serve_sdk(args.port, args.token_file)
    else:
        compare(args)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve", choices=("appdeck", "sdk"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-file", type=Path)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--servers", default="AppDeck,SDK")
    parser.add_argument("--baseline", type=Path, default=None)
    return parser.parse_args()


def compare(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {CLIENT_CPU})
    names = args.servers.split(",") + (["AppDeck-base"] if args.baseline else [])
    results = {name: Figures() for name in names}
    print(f"load before: {_load()}", flush=True)
    import uvloop

    with tempfile.TemporaryDirectory(prefix="appdeck-bench-fanout-") as tmp:
        for round_no in range(args.rounds):
            order = names if round_no % 2 == 0 else names[::-1]
            for name in order:
                server = Server(name, args.baseline if name == "AppDeck-base" else None)
                server.start(args.subscribers, Path(tmp))
                try:
                    uvloop.run(measure(server, args.subscribers, args.updates, results[name]))
                finally:
                    server.stop()
                print(f"round {round_no + 1} {name} done (load {_load()})", flush=True)
    print(
        f"\nfan-out of notifications/resources/updated to {args.subscribers} subscribers, "
        f"{args.rounds} rounds x {args.updates} updates; median over updates (ms, from the "
        "touch request written):"
    )
    head = ("first", "p50", "p99", "last", "spread", "cpu/upd")
    print(f"{'server':14s} " + " ".join(f"{h:>8s}" for h in head))
    for name, f in results.items():
        med = [statistics.median(v) for v in (f.first, f.p50, f.p99, f.last, f.spread, f.cpu)]
        print(f"{name:14s} " + " ".join(f"{m:8.1f}" for m in med))
    print("(cpu/upd: the server's CPU ms per update, median over the rounds)")
    print(f"load after: {_load()}")


if __name__ == "__main__":
    main()
