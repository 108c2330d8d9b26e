"""The stateless era (MCP 2026-07-28) behind the replica proxy: three ``appdeck serve`` on one
PostgreSQL and Redis, POSTs round-robin. No session is kept anywhere, so any replica answers
any request; a ``requestState`` sealed by one replica is verified by another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.replicas import Replicas, run_replicas
from tests.support.stateless import body, routing

pytestmark = pytest.mark.e2e
CALLS = 1000


@pytest.fixture
async def replicas(
    postgres_test_database: str, redis_prefix: str, tmp_path: Path
) -> AsyncIterator[Replicas]:
    async with run_replicas(
        postgres_test_database,
        redis_prefix,
        tmp_path,
        # 1,000 calls from one token: the per-token rate limit (429) is not what is measured
        extra_env={"APPDECK_RATE_LIMIT_PER_SECOND": "0"},
    ) as started:
        yield started


async def call(
    http: httpx.AsyncClient, replicas: Replicas, name: str, extra: dict[str, Any] | None = None
) -> httpx.Response:
    params = {"name": name, "arguments": {}, **(extra or {})}
    caps = {"elicitation": {}, "sampling": {}, "roots": {}}
    return await http.post(
        "/mcp",
        json=body("tools/call", params, capabilities=caps),
        headers={**routing("tools/call", name), **replicas.auth_headers},
    )


async def test_a_thousand_stateless_calls_round_robin_over_three_replicas_all_succeed(
    replicas: Replicas,
) -> None:
    failures: list[str] = []
    gate = asyncio.Semaphore(8)

    async with httpx.AsyncClient(base_url=replicas.origin, timeout=60) as http:

        async def one(n: int) -> None:
            async with gate:
                r = await call(http, replicas, "test_simple_text")
            if r.status_code != 200 or "mcp-session-id" in r.headers:
                failures.append(f"{n}: {r.status_code} {r.text[:200]}")
                return
            result = r.json().get("result") or {}
            if result.get("resultType") != "complete" or not result.get("content"):
                failures.append(f"{n}: {r.text[:200]}")

        async with asyncio.timeout(600):  # a loaded machine's bound; counted, not timed
            await asyncio.gather(*(one(n) for n in range(CALLS)))
    assert failures == [], failures[:5]
    served = {r.upstream for r in replicas.proxy.routed if r.method == "POST" and r.status == 200}
    assert len(served) == 3, served


async def test_each_round_of_an_input_required_call_may_land_on_another_replica(
    replicas: Replicas,
) -> None:
    name = "test_input_required_result_multi_round"
    async with (
        asyncio.timeout(120),
        httpx.AsyncClient(base_url=replicas.origin, timeout=60) as http,
    ):
        first = (await call(http, replicas, name)).json()["result"]
        assert first["resultType"] == "input_required"
        name_answer = {"action": "accept", "content": {"name": "Ada"}}
        second = (
            await call(
                http,
                replicas,
                name,
                {"inputResponses": {"step1": name_answer}, "requestState": first["requestState"]},
            )
        ).json()["result"]
        assert second["resultType"] == "input_required"
        assert list(second["inputRequests"]) == ["step2"]
        color = {"action": "accept", "content": {"color": "teal"}}
        third = (
            await call(
                http,
                replicas,
                name,
                {"inputResponses": {"step2": color}, "requestState": second["requestState"]},
            )
        ).json()["result"]
    assert third["content"][0]["text"] == "Multi-round complete for Ada who likes teal"
    rounds = [r.upstream for r in replicas.proxy.routed if r.method == "POST"][-3:]
    assert len(set(rounds)) == 3, rounds  # round-robin: three replicas, one round each
