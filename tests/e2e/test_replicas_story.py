"""Issue 13's must-show: three ``appdeck serve`` replicas behind a proxy without sticky
sessions (POSTs round-robin, GETs pinned to C), real PostgreSQL and Redis, the official
Python client and httpx."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.helpers import Inbox, official_client
from tests.support.replicas import Replicas, run_replicas

pytestmark = pytest.mark.e2e


@pytest.fixture
async def replicas(
    postgres_module_database: str, redis_prefix: str, tmp_path: Path
) -> AsyncIterator[Replicas]:
    async with run_replicas(postgres_module_database, redis_prefix, tmp_path) as started:
        yield started


async def test_one_session_is_served_by_all_three_replicas(replicas: Replicas) -> None:
    inbox = Inbox()
    async with asyncio.timeout(60), official_client(replicas, inbox) as client:  # type: ignore[arg-type]
        for _ in range(6):
            tools = await client.list_tools()
            assert any(t.name == "appdeck_test_count" for t in tools.tools)
    served = {r.upstream for r in replicas.proxy.routed if r.method == "POST" and r.status < 300}
    assert served == set(replicas.proxy.upstreams), replicas.proxy.routed
    assert inbox.errors == []


async def test_every_replica_reports_itself_healthy_with_its_own_instance(
    replicas: Replicas,
) -> None:
    seen = set()
    async with httpx.AsyncClient(timeout=10) as http:
        for server in replicas.servers:
            body = (await http.get(f"{server.origin}/healthz")).json()
            assert body["status"] == "ok"
            seen.add(body["instance"])
    assert len(seen) == 3
