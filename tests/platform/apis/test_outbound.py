"""test_api's outbound calls (issue 19, finding 5): one deadline per call that a trickling
answer cannot stretch, and a per-tenant share of the outbound pool, so one tenant's slow calls
never make another tenant's fail.

A real ingress in front of loopback upstreams; the document and key service are faked (the
operations below are all the rig's app serves)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appdeck.common.errors import Unavailable
from appdeck.common.identity import Principal
from appdeck.ingress.routes import Backend
from appdeck.platform.apis.client import AppHttp
from appdeck.platform.apis.tester import ApiCall, ApiTester
from appdeck.platform.apis.validation import Exchange, Verdict, verdict
from appdeck.storage import Storage
from tests.ingress.upstreams import Upstream
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.support.data_plane import haproxy_plane

ANSWERED: dict[str, Any] = {"200": {"description": "an answer"}}
DOC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "rig", "version": "1"},
    "paths": {
        "/items": {"get": {"responses": ANSWERED}},
        "/slow": {"get": {"responses": ANSWERED}},
        "/stream": {"get": {"responses": ANSWERED}},
    },
}


@dataclass
class Latest:
    document: dict[str, Any]
    version: int = 1


class OneDocument:
    async def latest(self, principal: Principal, app_id: int) -> Latest:
        return Latest(DOC)


class NoKeys:
    async def test_credential(self, principal: Principal, app_id: int) -> str | None:
        return None


class InProcess:
    async def check(self, exchange: Exchange) -> Verdict:
        return verdict(exchange)


@dataclass
class Rig:
    on: OnFakes
    http: AppHttp
    tester: ApiTester
    fast: Upstream
    slow: Upstream
    shop: int
    """acme's app (tenant t1), served by ``fast``."""
    slowpoke: int
    """globex's app (tenant t2), served by ``slow``."""


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> AsyncIterator[Rig]:
    on = await platform_on_fakes(storage, tmp_path)
    shop = (await on.platform.apps.register(on.alice, "shop")).app.id
    slowpoke = (await on.platform.apps.register(on.eve, "slowpoke")).app.id
    fast, slow = await Upstream("fast").start(), await Upstream("slow").start()
    try:
        async with haproxy_plane(tmp_path / "plane") as router:
            plane = router.plane
            plane.table.set("shop--acme", [Backend("r1", 100, [fast.address])])
            plane.table.set("slowpoke--globex", [Backend("r1", 100, [slow.address])])
            assert await plane.synced()
            http = AppHttp("127.0.0.1", plane.port)  # the default pool and shares
            tester = ApiTester(on.platform.apps, OneDocument(), NoKeys(), http)  # type: ignore[arg-type]
            tester.checker = InProcess()  # type: ignore[assignment]
            try:
                yield Rig(on, http, tester, fast, slow, shop, slowpoke)
            finally:
                await http.aclose()
    finally:
        await asyncio.gather(fast.stop(), slow.stop())


async def test_a_trickling_answer_ends_at_the_calls_deadline(rig: Rig) -> None:
    # one chunk every 0.5 s for 60 s: each read is quick, so only an overall deadline ends it
    call = ApiCall("GET", "/stream", query={"n": 120, "delay": 0.5}, timeout_s=2)
    async with asyncio.timeout(30):  # the trickle would take 60 s; the deadline is 2 s
        with pytest.raises(Unavailable, match=r"within 2 s") as ended:
            await rig.tester.call(rig.on.eve, rig.slowpoke, call)
    assert "the whole body" in ended.value.message


async def _slow_call(rig: Rig) -> str:
    call = ApiCall("GET", "/slow", query={"delay": 25}, timeout_s=30)
    try:
        await rig.tester.call(rig.on.eve, rig.slowpoke, call)
    except Unavailable as exc:
        return exc.message
    return "answered"


async def test_one_tenants_slow_calls_do_not_starve_another_tenants_calls(rig: Rig) -> None:
    # t2 (globex) starts more slow calls than the whole pool holds (50 connections)
    t2 = [asyncio.create_task(_slow_call(rig)) for _ in range(55)]
    try:
        async with asyncio.timeout(20):
            while len(rig.slow.seen) < 10:  # noqa: ASYNC110 - t2 holds (at least) its share
                await asyncio.sleep(0.05)
        for _ in range(3):  # while t2 holds its whole share, t1's calls are answered
            answer = await rig.tester.call(
                rig.on.alice, rig.shop, ApiCall("GET", "/items", timeout_s=10)
            )
            assert answer.status == 200
        # t2's calls over its share wait a bounded time, then are told why (never the pool)
        done, _ = await asyncio.wait(t2, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        refused = [t.result() for t in done]
        assert refused
        assert all("share" in why for why in refused), refused
        assert len(rig.slow.seen) <= 10  # never more than t2's share reached its app
    finally:
        for task in t2:
            task.cancel()
        await asyncio.gather(*t2, return_exceptions=True)
