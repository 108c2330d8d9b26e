"""The console across replicas: a browser signed in through one replica is signed in on the
other (the session is a database row), and a change made through one replica's MCP endpoint
reaches a live console stream held by the other (the broadcast's console channel on Redis)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.mcp import headers, initialize, request
from tests.support.replicas import Replicas, run_replicas

pytestmark = pytest.mark.e2e
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
async def replicas(
    postgres_test_database: str, redis_prefix: str, tmp_path: Path
) -> AsyncIterator[Replicas]:
    async with run_replicas(postgres_test_database, redis_prefix, tmp_path, count=2) as started:
        yield started


async def _sign_in(http: httpx.AsyncClient, password: str) -> None:
    form = await http.get("/console/signin")
    found = CSRF.search(form.text)
    assert found is not None, form.text
    answer = await http.post(
        "/console/signin",
        data={"tenant": "dev", "username": "dev", "password": password, "csrf": found.group(1)},
    )
    assert answer.status_code == 303, answer.text


async def test_a_change_through_one_replica_moves_a_console_stream_on_the_other(
    replicas: Replicas,
) -> None:
    a, b = replicas.servers
    async with (
        asyncio.timeout(120),
        httpx.AsyncClient(base_url=a.origin, timeout=20) as on_a,
        httpx.AsyncClient(base_url=b.origin, timeout=20) as on_b,
    ):
        await _sign_in(on_a, replicas.dev_password())
        on_b.cookies.set("appdeck_console", on_a.cookies["appdeck_console"])
        assert (await on_b.get("/console")).status_code == 200  # signed in on B too
        token = replicas.token
        sid = await initialize(on_a, token)
        made = await on_a.post(
            "/mcp",
            json=request("tools/call", {"name": "register_app", "arguments": {"name": "shop"}}),
            headers=headers(sid, token),
        )
        app_id = made.json()["result"]["structuredContent"]["app_id"]
        async with on_b.stream("GET", f"/console/apps/{app_id}/events") as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            assert (await anext(lines)).startswith("retry: ")
            update = {"name": "manage_app", "arguments": {"app_id": app_id, "action": "update",
                                                          "description": "moved"}}  # fmt: skip
            changed = await on_a.post(
                "/mcp", json=request("tools/call", update), headers=headers(sid, token)
            )
            assert not changed.json()["result"].get("isError"), changed.text
            data = ""
            async for line in lines:
                if line.startswith("data: "):
                    data = line.removeprefix("data: ")
                    break
        assert orjson.loads(data) == {"kind": "app.updated", "app": app_id, "deployment": None}
        page = await on_b.get(f"/console/apps/{app_id}")
        assert "moved" in page.text
