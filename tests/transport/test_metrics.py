"""``/metrics`` through the whole stack: what the MCP endpoint served is counted there, and a
client beyond loopback reads it only with the scrape token."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from appdeck.app import Services
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from tests.support.mcp import headers, initialize, parse_sse, request
from tests.support.stateless import StatelessCaller

from .conftest import running

TOKEN = "alice-token"
SCRAPE_TOKEN = "s3cret-scrape-token-0123456789"


def sample(text: str, name: str, **labels: str) -> float:
    """A sample's value in a Prometheus text exposition (0 when absent)."""
    for line in text.splitlines():
        got = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if got and got[1] == name and dict(re.findall(r'(\w+)="([^"]*)"', got[2] or "")) == labels:
            return float(got[3])
    return 0.0


async def scrape(client: httpx.AsyncClient) -> str:
    r = await client.get("/metrics")
    assert r.status_code == 200
    return r.text


async def test_tool_calls_requests_and_refusals_appear_in_the_scrape(
    client: httpx.AsyncClient,
) -> None:
    before = await scrape(client)
    sid = await initialize(client, TOKEN)
    call = {"name": "echo", "arguments": {"text": "hi"}}
    for n in range(3):
        r = await client.post(
            "/mcp", json=request("tools/call", call, id=n), headers=headers(sid, TOKEN)
        )
        assert r.status_code == 200
    missing = {"name": "no_such_tool", "arguments": {}}
    await client.post(
        "/mcp", json=request("tools/call", missing, id=9), headers=headers(sid, TOKEN)
    )
    r = await client.post("/mcp", json=request("tools/list"), headers=headers(sid, "wrong-token"))
    assert r.status_code == 401
    after = await scrape(client)

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("appdeck_mcp_tool_calls_total", tool="echo", outcome="ok") == 3
    assert delta("appdeck_mcp_tool_call_seconds_count", tool="echo") == 3
    assert delta("appdeck_mcp_tool_calls_total", tool="other", outcome="invalid") == 1
    assert (
        delta("appdeck_mcp_requests_total", method="tools/call", era="handshake", outcome="ok") == 3
    )
    assert (
        delta("appdeck_mcp_requests_total", method="initialize", era="handshake", outcome="ok") == 1
    )
    assert delta("appdeck_mcp_refusals_total", reason="unauthenticated") == 1
    assert sample(after, "appdeck_mcp_sessions_open") >= 1
    assert "no_such_tool" not in after


async def test_a_stateless_request_is_counted_in_its_era(client: httpx.AsyncClient) -> None:
    before = await scrape(client)
    r = await StatelessCaller(client, TOKEN).post("tools/list")
    assert r.status_code == 200
    after = await scrape(client)
    labels = {"method": "tools/list", "era": "stateless", "outcome": "ok"}
    assert (
        sample(after, "appdeck_mcp_requests_total", **labels)
        == sample(before, "appdeck_mcp_requests_total", **labels) + 1
    )


async def streams_open_now(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Sends progress (the answer becomes an SSE stream), then reads the gauge mid-stream."""
    await ctx.progress(1, 1, "streaming now")
    value = REGISTRY.get_sample_value("appdeck_mcp_streams_open", {"kind": "post"})
    return {"content": [{"type": "text", "text": str(value)}]}


async def test_a_post_answered_as_a_stream_is_open_while_it_runs_and_closed_after(
    services: Services, client: httpx.AsyncClient
) -> None:
    services.registry.add_tool(
        ToolDef("streams_open_now", "Gauge", {"type": "object"}, streams_open_now)
    )
    sid = await initialize(client, TOKEN)
    before = REGISTRY.get_sample_value("appdeck_mcp_streams_open", {"kind": "post"}) or 0.0
    params = {"name": "streams_open_now", "arguments": {}, "_meta": {"progressToken": 1}}
    r = await client.post("/mcp", json=request("tools/call", params), headers=headers(sid, TOKEN))
    assert r.headers["content-type"] == "text/event-stream"
    answer = parse_sse(r.text)[-1].json()
    assert float(answer["result"]["content"][0]["text"]) == before + 1
    assert REGISTRY.get_sample_value("appdeck_mcp_streams_open", {"kind": "post"}) == before


@pytest.fixture
async def guarded(database_url: str, tmp_path: Path) -> AsyncIterator[Services]:
    settings = Settings(data_dir=tmp_path, database_url=database_url, metrics_token=SCRAPE_TOKEN)
    async with running(settings) as svc:
        yield svc


def from_afar(services: Services, *, token: str | None = None) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=services.asgi(), client=("203.0.113.7", 40000))
    auth = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=transport, base_url="http://appdeck.example", headers=auth)


async def test_a_client_beyond_loopback_needs_the_scrape_token(guarded: Services) -> None:
    async with from_afar(guarded) as anonymous:
        r = await anonymous.get("/metrics")
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == 'Bearer realm="metrics"'
        assert "appdeck_mcp" not in r.text
    async with from_afar(guarded, token="s3cret-scrape-token-012345678X") as wrong:
        assert (await wrong.get("/metrics")).status_code == 401
    async with from_afar(guarded, token=TOKEN) as mcp_token:  # an MCP token is not the scrape token
        assert (await mcp_token.get("/metrics")).status_code == 401
    async with from_afar(guarded, token=SCRAPE_TOKEN) as scraper:
        r = await scraper.get("/metrics")
        assert r.status_code == 200
        assert "appdeck_mcp_requests_total" in r.text
    transport = httpx.ASGITransport(app=guarded.asgi(), client=("203.0.113.7", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://appdeck.example") as c:
        spelled = {"authorization": f"bEaReR  {SCRAPE_TOKEN}"}  # the scheme is case-insensitive
        assert (await c.get("/metrics", headers=spelled)).status_code == 200
        basic = {"authorization": f"Basic {SCRAPE_TOKEN}"}
        assert (await c.get("/metrics", headers=basic)).status_code == 401


async def test_without_a_scrape_token_only_loopback_reads_the_metrics(
    services: Services, client: httpx.AsyncClient
) -> None:
    async with from_afar(services, token=SCRAPE_TOKEN) as stranger:
        r = await stranger.get("/metrics")
        assert r.status_code == 403
        assert "appdeck_mcp" not in r.text
    assert (await client.get("/metrics")).status_code == 200  # 127.0.0.1


@pytest.mark.parametrize("token", ["short", "has space in it 0123456789", "x" * 300])
def test_a_scrape_token_that_is_short_long_or_not_printable_is_refused_at_start(
    tmp_path: Path, token: str
) -> None:
    with pytest.raises(ValueError, match="metrics_token"):
        Settings(data_dir=tmp_path, metrics_token=token)
