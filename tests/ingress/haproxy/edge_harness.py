"""A real HAProxy around the edge's lines, for the edge and mirror tests.

Until ``haproxy-core`` renders the whole config, the harness plays core's part with the least
it does: ``txn.route`` from ``<route>.localhost`` (or ``<route>.apps.example.test``), then the
edge's rules, then ``use_backend be_%[var(txn.route)]``, a 404 otherwise. Two routes: ``shop``
and ``blog``, both to one recording upstream app.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from appdeck.ingress.haproxy import edge
from appdeck.ingress.haproxy.runtime_api import RuntimeApi, RuntimeApiError
from tests.ingress.upstreams import Upstream
from tests.support.mcp import free_port

ROUTE_LINES: Final = (
    "http-request set-var(txn.route) req.hdr(host),field(1,:),lower,field(1,.) "
    "if { req.hdr(host),field(1,:),lower -m end .localhost .apps.example.test }",
)
BACKEND_LINES: Final = (
    "use_backend be_%[var(txn.route)] if { var(txn.route),length gt 0 }",
    "default_backend be_none",
)


@dataclass
class Edge:
    """A running HAProxy: its ports, runtime API, master socket and paths."""

    paths: edge.EdgePaths
    http_port: int
    https_port: int
    api: RuntimeApi
    master: RuntimeApi
    app: Upstream
    config: Path
    options: edge.EdgeOptions
    extra: list[str] = field(default_factory=list)

    async def worker_pid(self) -> int:
        """The current worker's pid (``show proc``): a reload changes it."""
        for line in (await self.master.command("show proc")).splitlines():
            parts = line.split()
            if len(parts) > 1 and parts[1] == "worker":
                return int(parts[0])
        raise AssertionError("no worker")


def render(
    paths: edge.EdgePaths,
    options: edge.EdgeOptions,
    stats: Path,
    http_port: int,
    app_address: str,
    extra: Sequence[str] = (),
) -> str:
    lines = [
        "global",
        f"  stats socket {stats} mode 600 level admin",
        *(f"  {line}" for line in edge.global_lines(paths)),
        "defaults",
        "  mode http",
        "  timeout connect 5s",
        "  timeout client 30s",
        "  timeout server 30s",
        "frontend fe_http",
        f"  bind 127.0.0.1:{http_port}",
        *(f"  {line}" for line in (*ROUTE_LINES, *edge.http_rules(paths, options), *BACKEND_LINES)),
        "backend be_none",
        "  http-request return status 404",
        *(f"backend be_{route}\n  server s1 {app_address}" for route in ("shop", "blog")),
        *edge.extra_sections(paths, options, ROUTE_LINES, BACKEND_LINES),
        *extra,
    ]
    return "\n".join(lines) + "\n"


@asynccontextmanager
async def running_edge(
    tmp_path: Path,
    options: Callable[[int, str], edge.EdgeOptions] = lambda _port, _app: edge.EdgeOptions(),
    extra: Sequence[str] = (),
    maps: dict[str, str] | None = None,
) -> AsyncIterator[Edge]:
    """HAProxy (master-worker) with the edge around a recording app; ``options`` gets the
    HTTPS port chosen for the test and the app's address; ``maps`` (name → content) are written before it starts."""
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    paths = edge.EdgePaths(tmp_path / "edge")
    edge.prepare(paths)
    for name, content in (maps or {}).items():
        paths.map(name).write_text(content)
    app = await Upstream("app").start()
    http_port, https_port = free_port(), free_port()
    chosen = options(https_port, app.address)
    stats, master_sock = tmp_path / "stats.sock", tmp_path / "master.sock"
    config = tmp_path / "haproxy.cfg"
    config.write_text(render(paths, chosen, stats, http_port, app.address, extra))
    process = await asyncio.create_subprocess_exec(
        binary,
        "-W",
        "-S",
        str(master_sock),
        "-f",
        str(config),
        stderr=asyncio.subprocess.PIPE,
    )
    api, master = RuntimeApi(stats), RuntimeApi(master_sock, master=True)
    try:
        async with asyncio.timeout(30):  # both sockets listening (a bound, not a speed)
            for sock, probe in ((api, "show info"), (master, "show proc")):
                while True:
                    if process.returncode is not None:
                        assert process.stderr is not None
                        raise AssertionError((await process.stderr.read()).decode()[-3000:])
                    try:
                        await sock.command(probe)
                        break
                    except RuntimeApiError:
                        await asyncio.sleep(0.05)
        yield Edge(paths, http_port, https_port, api, master, app, config, chosen)
    finally:
        if process.returncode is None:
            process.terminate()
        async with asyncio.timeout(10):
            await process.wait()
        await app.stop()
