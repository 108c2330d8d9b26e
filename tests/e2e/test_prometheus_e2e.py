"""A real Prometheus (Debian's ``prometheus``) scrapes a real ``appdeck serve`` every second
while the official MCP client runs a story; PromQL then counts what the story did. And
``/metrics`` refuses a client beyond loopback without the scrape token.

The story and the queries are apart (:func:`_story` returns what it did, the test asks
Prometheus): a new series is checked by one more query after the scrape that followed the
story is in.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, MCPError

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import hello_source, official_client, through_ingress
from tests.support import laptop as laptops
from tests.support.appdeck_process import AppDeckProcess
from tests.support.replicas import run_replicas

SCRAPE_EVERY_S = 1
PROMETHEUS_START_S = 60.0
"""Bounds for a loaded 2-core machine, not speeds."""
SCRAPED_WITHIN_S = 30.0
SCRAPE_TOKEN = "e2e-scrape-token-0123456789abcdef"


# -- Prometheus -------------------------------------------------------------------------------


class NoSample(AssertionError):
    """The query's answer had no sample (the series is not scraped yet, or not at all)."""


@dataclass
class Prometheus:
    """A ``prometheus`` process scraping one AppDeck, and its HTTP API."""

    url: str
    http: httpx.AsyncClient

    async def query(self, promql: str) -> float:
        """The value of an instant query whose answer is one sample (a scalar or a vector of
        one); :class:`NoSample` when the vector is empty."""
        r = await self.http.get(f"{self.url}/api/v1/query", params={"query": promql})
        assert r.status_code == 200, (promql, r.text)
        data = r.json()["data"]
        if data["resultType"] == "scalar":
            return float(data["result"][1])
        result = data["result"]
        if not result:
            raise NoSample(promql)
        assert len(result) == 1, (promql, result)
        return float(result[0]["value"][1])

    async def eventually(self, promql: str, expected: float, within: float) -> None:
        """Poll ``promql`` until it equals ``expected`` (the next scrapes coming in), at most
        ``within`` seconds; then fail with what it last was."""
        last: float | str = "no sample"
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while True:
                    with contextlib.suppress(NoSample):
                        last = await self.query(promql)
                        if last == expected:
                            return
                    await asyncio.sleep(0.25)
        raise AssertionError(f"{promql} stayed {last}, expected {expected}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def prometheus_scraping(
    servers: list[AppDeckProcess], workdir: Path
) -> AsyncIterator[Prometheus]:
    """``prometheus`` on a free loopback port, its storage under ``workdir``, scraping each
    server's ``/metrics`` every second (from loopback: no token); killed on the way out."""
    workdir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a test's setup, once
    targets = [server.origin.removeprefix("http://") for server in servers]
    config = workdir / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {
                    "scrape_interval": f"{SCRAPE_EVERY_S}s",
                    "evaluation_interval": f"{SCRAPE_EVERY_S}s",
                },
                "scrape_configs": [
                    {
                        "job_name": "appdeck",
                        "scrape_timeout": f"{SCRAPE_EVERY_S}s",
                        "static_configs": [{"targets": targets}],
                    }
                ],
            }
        )
    )
    port = _free_port()
    with (workdir / "prometheus.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            prometheus = Prometheus(f"http://127.0.0.1:{port}", http)
            await _ready(prometheus, process, workdir / "prometheus.log", len(targets))
            yield prometheus
    finally:
        if process.returncode is None:
            process.kill()
        async with asyncio.timeout(10):
            await process.wait()


async def _ready(
    prometheus: Prometheus, process: asyncio.subprocess.Process, log: Path, targets: int
) -> None:
    """Wait until Prometheus answers and has scraped every server once (each target up)."""
    try:
        async with asyncio.timeout(PROMETHEUS_START_S):
            while True:
                if process.returncode is not None:
                    raise AssertionError("prometheus exited:\n" + _tail(log))
                with contextlib.suppress(httpx.TransportError, NoSample):
                    ready = await prometheus.http.get(f"{prometheus.url}/-/ready")
                    up = 'sum(up{job="appdeck"})'
                    # 503 while its storage opens
                    if ready.status_code == 200 and await prometheus.query(up) == targets:
                        return
                await asyncio.sleep(0.25)
    except TimeoutError:
        raise AssertionError("prometheus never scraped the server:\n" + _tail(log)) from None


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


# -- the story --------------------------------------------------------------------------------


@dataclass
class Story:
    """What the story did, for the queries to count."""

    tool_calls: dict[tuple[str, str], int] = field(default_factory=dict)
    """(tool, outcome) → calls."""
    app_id: int = 0
    exits_id: int = 0
    hello_requests: int = 0
    """Requests the bad canary's traffic sent to hello."""

    def called(self, tool: str, outcome: str) -> None:
        self.tool_calls[tool, outcome] = self.tool_calls.get((tool, outcome), 0) + 1

    def calls(self, outcome: str | None = None) -> int:
        return sum(n for (_, o), n in self.tool_calls.items() if outcome in (None, o))


async def _call(client: Client, story: Story, tool: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, arguments)
    story.called(tool, "tool_error" if result.is_error else "ok")
    return result


EXITS = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "exits"
"""An app that exits, or is killed, as a request asks (``/exit?code=N``, ``/hog?mb=N``)."""
CANARY = {"percent": 50, "steps": [50, 100], "analysis_window_s": 2, "max_error_rate": 0.05}


def _spec(source: Path, **extra: Any) -> dict[str, Any]:
    return {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        **extra,
    }


async def _get(app_url: str, path: str) -> int:
    """GET ``path`` of the app through the ingress: its status, 0 when it died answering."""
    where = through_ingress(app_url)
    with contextlib.suppress(httpx.HTTPError):
        async with httpx.AsyncClient(timeout=20) as http:
            answer = await http.get(where["url"].rstrip("/") + path, headers=where["headers"])
            return answer.status_code
    return 0


@contextlib.asynccontextmanager
async def _traffic(app_url: str) -> AsyncIterator[list[int]]:
    """Requests to the app, one after another, for as long as the block runs: the statuses."""
    statuses: list[int] = []
    done = asyncio.Event()

    async def send() -> None:
        where = through_ingress(app_url)
        async with httpx.AsyncClient(timeout=10) as http:
            while not done.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    statuses.append((await http.get(**where)).status_code)
                await asyncio.sleep(0.02)

    task = asyncio.create_task(send())
    try:
        yield statuses
    finally:
        done.set()
        await task


async def _status(client: Client, app_id: int) -> dict[str, Any]:
    read = await client.read_resource(f"appdeck://apps/{app_id}/status")
    return dict(json.loads(read.contents[0].text))  # type: ignore[union-attr]


async def _status_once(client: Client, app_id: int, done: Any) -> dict[str, Any]:
    """The app's status resource once ``done(status)`` holds (bounded: 60 s)."""
    status: dict[str, Any] = {}
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(60):
            while True:
                status = await _status(client, app_id)
                if done(status):
                    return status
                await asyncio.sleep(0.2)
    raise AssertionError(f"not reached; the last status: {status}")


async def _deploy(client: Client, story: Story, app_id: int, strategy: str) -> str:
    deployed = await _call(
        client, story, "deploy_app", {"app_id": app_id, "strategy": strategy, "wait_seconds": 60}
    )
    state = str(deployed.structured_content["state"])
    assert deployed.is_error == (state != "live"), deployed  # a rolled-back deploy: an error
    return state


async def _story(server: AppDeckProcess, source: Path) -> Story:
    """Tool calls with the official client:
    - the hello app registered and deployed (rolling), then a good canary under traffic, then
      a bad one (every answer 500) under traffic: rolled back on its error rate;
    - the exits app deployed, made to exit with status 3, then killed at its memory limit:
      its status resource says so;
    - a tool error (an app that does not exist) and a tool the server does not have."""
    story = Story()
    async with official_client(server) as client:
        await client.list_tools()
        made = await _call(
            client, story, "register_app", {"name": "hello", "spec": _spec(source, canary=CANARY)}
        )
        assert not made.is_error, made
        story.app_id = hello = made.structured_content["app_id"]
        assert await _deploy(client, story, hello, "rolling") == "live"
        got = await _call(client, story, "get_app_url", {"app_id": hello})
        hello_url = got.structured_content["url"]
        async with _traffic(hello_url) as statuses:
            assert await _deploy(client, story, hello, "canary") == "live"
        assert statuses
        assert set(statuses) == {200}, statuses
        await _call(
            client,
            story,
            "env_vars",
            {"app_id": hello, "action": "set", "name": "FAIL_ALL", "value": "1"},
        )
        async with _traffic(hello_url) as statuses:
            assert await _deploy(client, story, hello, "canary") == "rolled_back"
        assert 500 in statuses, statuses  # the canary's share answered 500
        story.hello_requests = len(statuses)

        exits_source = source.parent / "exits"
        shutil.copytree(EXITS, exits_source)
        spec = _spec(exits_source, resources={"memory_mb": 64})
        made = await _call(client, story, "register_app", {"name": "exits", "spec": spec})
        story.exits_id = exits = made.structured_content["app_id"]
        assert await _deploy(client, story, exits, "rolling") == "live"
        got = await _call(client, story, "get_app_url", {"app_id": exits})
        exits_url = got.structured_content["url"]
        await _get(exits_url, "/exit?code=3")
        crashed = await _status_once(client, exits, lambda s: s["restarts"] == 1)
        assert crashed["instance_details"][0]["last_exit"] == "status 3", crashed
        for _ in range(300):  # the restarted instance answers again (60 s at most)
            if await _get(exits_url, "/healthz") == 200:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("the restarted exits app never answered again")
        await _get(exits_url, "/hog?mb=256")
        killed = await _status_once(client, exits, lambda s: s["restarts"] == 2)
        [instance] = killed["instance_details"]
        assert instance["oom_kills"] >= 1, killed
        assert instance["last_exit"] == "signal SIGKILL", killed

        missing = await _call(client, story, "manage_app", {"app_id": 987654, "action": "get"})
        assert missing.is_error, missing
        with pytest.raises(MCPError):
            await client.call_tool("no_such_tool", {})
        story.called("other", "invalid")  # a name the server does not serve: never a label
        await _call(client, story, "list_deployments", {"app_id": hello})
    return story


async def _requests_served(server: AppDeckProcess) -> float:
    """``sum(appdeck_mcp_requests_total)`` read from the server itself (loopback)."""
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.get(f"{server.origin}/metrics")
    assert r.status_code == 200, r.text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in r.text.splitlines()
        if line.startswith("appdeck_mcp_requests_total{")
    )


@pytest.mark.e2e
async def test_promql_counts_a_storys_tool_calls_deploys_canary_rollback_crash_and_oom_kill(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    source, env = hello_source(tmp_path)
    server = await launch_appdeck(env=env)
    async with asyncio.timeout(420), prometheus_scraping([server], tmp_path / "prom") as prom:
        story = await _story(server, source)
        served = await _requests_served(server)  # nothing but our story sends MCP requests
        # the scrape after the story is in once Prometheus agrees with the server
        await prom.eventually("sum(appdeck_mcp_requests_total)", served, SCRAPED_WITHIN_S)

        async def count(promql: str) -> float:
            return await prom.query(promql)

        # hello: rolling, a good canary, a bad one (a tool error: rolled back); exits: rolling
        assert story.tool_calls["deploy_app", "ok"] == 3
        assert story.tool_calls["deploy_app", "tool_error"] == 1
        deploy_app = 'appdeck_mcp_tool_calls_total{{tool="deploy_app",outcome="{}"}}'
        assert await count(deploy_app.format("ok")) == 3
        assert await count(deploy_app.format("tool_error")) == 1
        assert await count('sum(appdeck_mcp_tool_calls_total{outcome="tool_error"})') == 2
        assert (
            await count('appdeck_mcp_tool_calls_total{tool="manage_app",outcome="tool_error"}')
            == story.tool_calls["manage_app", "tool_error"]
        )
        assert await count('appdeck_mcp_tool_calls_total{tool="other",outcome="invalid"}') == 1
        assert await count("sum(appdeck_mcp_tool_calls_total)") == story.calls()
        assert await count('sum(appdeck_mcp_requests_total{method="tools/call"})') == story.calls()
        assert await count('sum(appdeck_mcp_requests_total{method="tools/list"})') >= 1
        assert await count('appdeck_mcp_tool_call_seconds_count{tool="deploy_app"}') == 4
        p95 = 'histogram_quantile(0.95, sum by (le) (appdeck_mcp_tool_call_seconds_bucket{tool="deploy_app"}))'
        assert await count(p95) > 0  # a deploy that waited for live takes time
        assert await count("appdeck_mcp_sessions_open") >= 0
        # deploys: two rolling and a good canary went live, the bad canary rolled back on
        # its error rate; every run built once
        live = 'appdeck_deploys_finished_total{{kind="deploy",strategy="{}",outcome="{}"}}'
        assert await count('appdeck_deploys_started_total{kind="deploy",strategy="rolling"}') == 2
        assert await count(live.format("rolling", "live")) == 2
        assert await count(live.format("canary", "live")) == 1
        assert await count(live.format("canary", "rolled_back")) == 1
        assert await count('appdeck_canary_rollbacks_total{reason="error_rate"}') == 1
        assert await count('appdeck_canary_rollbacks_total{reason="crash_loop"}') == 0
        assert await count('appdeck_deploy_phase_seconds_count{phase="build"}') == 4
        assert await count('appdeck_deploy_phase_seconds_count{phase="analysis"}') >= 2
        # apps: exits crashed twice (status 3, then the OOM kill) and was restarted each time;
        # hello's traffic and its bad canary's 500s came through the data plane
        await prom.eventually('appdeck_app_restarts_total{app=~"exits--.+"}', 2, SCRAPED_WITHIN_S)
        assert await count('appdeck_app_oom_kills_total{app=~"exits--.+"}') >= 1
        assert await count('appdeck_app_crash_loops_total{app=~"exits--.+"}') == 0
        assert await count('appdeck_app_instances{app=~"exits--.+",state="desired"}') == 1
        hello_http = 'sum(appdeck_app_http_requests_total{{app=~"hello--.+"{}}})'
        assert await count(hello_http.format("")) >= story.hello_requests
        assert await count(hello_http.format(',code="5xx"')) >= 1
        # storage: the embedded SQLite answered every statement; no lease outlives the story
        assert await count('appdeck_db_query_seconds_count{backend="sqlite"}') > 0
        assert await count('appdeck_db_pool_connections{state="max"}') == 15  # SQLite's 5 + 10
        assert await count('sum(appdeck_leases_held{kind="app"})') == 0
        assert await count('appdeck_replica_heartbeats_total{outcome="failed"}') == 0
        assert await count("sum(appdeck_ci_runs_total)") == 0


@pytest.mark.e2e
async def test_prometheus_sees_two_replicas_share_postgresql_and_redis(
    postgres_test_database: str, redis_prefix: str, tmp_path: Path
) -> None:
    async with (
        # the set's own bounds first: it may wait its turn behind another worker's set
        run_replicas(postgres_test_database, redis_prefix, tmp_path, count=2) as replicas,
        asyncio.timeout(240),
        prometheus_scraping(replicas.servers, tmp_path / "prom") as prom,
    ):
        async with official_client(replicas.servers[0]) as first:
            await first.list_tools()
            await first.call_tool("list_my_apps", {})
        async with official_client(replicas.servers[1]) as second:
            await second.call_tool("list_my_apps", {})
        # each replica counted the other alive at a heartbeat (every 2 s)
        await prom.eventually("min(appdeck_replica_peers)", 2, SCRAPED_WITHIN_S)
        await prom.eventually(
            'sum(appdeck_mcp_tool_calls_total{tool="list_my_apps",outcome="ok"})',
            2,
            SCRAPED_WITHIN_S,
        )
        assert await prom.query('min(appdeck_replica_heartbeats_total{outcome="ok"})') > 0
        assert await prom.query('sum(appdeck_replica_heartbeats_total{outcome="failed"})') == 0
        assert await prom.query("min(appdeck_redis_command_seconds_count)") > 0  # on each
        assert await prom.query('max(appdeck_redis_pool_connections{state="max"})') == 64
        assert await prom.query('min(appdeck_db_query_seconds_count{backend="postgresql"})') > 0
        assert await prom.query('sum(appdeck_db_query_seconds_count{backend="sqlite"})') == 0
        assert await prom.query('max(appdeck_db_pool_connections{state="max"})') == 20
        assert await prom.query('count(appdeck_leases_held{kind="stream"})') == 2


# -- /metrics beyond loopback ----------------------------------------------------------------


async def _host_address() -> str | None:
    """One of this host's own addresses that is not loopback (IPv4, global scope)."""
    process = await asyncio.create_subprocess_exec(
        "ip", "-j", "-4", "addr", "show", "scope", "global", stdout=subprocess.PIPE
    )
    async with asyncio.timeout(10):
        out, _ = await process.communicate()
    for link in json.loads(out or b"[]"):
        for info in link.get("addr_info", []):
            if info.get("local"):
                return str(info["local"])
    return None


@contextlib.asynccontextmanager
async def foreign_client() -> AsyncIterator[Any]:
    """``get(url, token) -> status`` from a client the server sees beyond loopback: this
    host's own non-loopback address, else (a host with none) a network namespace over a veth
    pair (:mod:`tests.support.laptop`)."""
    address = await _host_address()
    if address is not None:

        async def get_here(port: int, token: str | None) -> int:
            headers = {"authorization": f"Bearer {token}"} if token else {}
            async with httpx.AsyncClient(timeout=10) as http:
                r = await http.get(f"http://{address}:{port}/metrics", headers=headers)
            return r.status_code

        yield get_here
        return
    why = laptops.unavailable()
    if why is not None:
        pytest.fail(f"no non-loopback address here, and no namespace can be made: {why}")
    async with laptops.laptop() as lap:

        async def get_from_laptop(port: int, token: str | None) -> int:
            auth = ("-H", f"authorization: Bearer {token}") if token else ()
            status, _ = await lap.curl(f"http://{lap.host_ip}:{port}/metrics", *auth)
            return status

        yield get_from_laptop


def _port(server: AppDeckProcess) -> int:
    return int(server.origin.rsplit(":", 1)[1])


@pytest.mark.e2e
async def test_metrics_beyond_loopback_need_the_scrape_token(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    async with asyncio.timeout(180), foreign_client() as get:
        closed = await launch_appdeck(tmp_path / "closed", env={"APPDECK_HOST": "0.0.0.0"})
        assert await get(_port(closed), None) == 403  # no token configured: loopback only
        assert await get(_port(closed), SCRAPE_TOKEN) == 403
        tokened = await launch_appdeck(
            tmp_path / "tokened",
            env={"APPDECK_HOST": "0.0.0.0", "APPDECK_METRICS_TOKEN": SCRAPE_TOKEN},
        )
        assert await get(_port(tokened), None) == 401
        assert await get(_port(tokened), "not-the-scrape-token-at-all") == 401
        assert tokened.token is not None
        assert await get(_port(tokened), tokened.token) == 401  # an MCP token is not it
        assert await get(_port(tokened), SCRAPE_TOKEN) == 200
        async with httpx.AsyncClient(timeout=10) as http:  # loopback: always
            assert (await http.get(f"{tokened.origin}/metrics")).status_code == 200
