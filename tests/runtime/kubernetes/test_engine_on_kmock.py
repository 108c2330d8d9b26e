"""The deploy engine on the real :class:`KubernetesDriver` and :class:`GatewayRouter`, with kmock
as the API server and the test as the controllers (:class:`Controllers` of the scenario test,
run in a loop): a deploy, a restart (a new release, as the driver has no ``in_place_restart``)
and a scale, seen as the Deployments, their ``replicas`` and the HTTPRoute's weights.

What this proves beyond the fakes of tests/platform/deploy/test_engine_kubernetes.py: that the
engine's backends (the driver's Service upstreams) reach the gateway router, and that its
index-wise scale becomes ``replicas``. Not proved: the wiring of a server (not built), anything
a real cluster does (see test_e2e_scenario_kmock.py's list).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import kmock
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from appdeck.runtime.kubernetes.api import KubeApi
from appdeck.runtime.kubernetes.driver import KubernetesDriver
from appdeck.runtime.kubernetes.metrics import NO_METRICS
from appdeck.runtime.kubernetes.router import GatewayRouter
from appdeck.storage import Storage
from tests.platform.deploy.test_engine import Rig, make_rig
from tests.runtime.kubernetes.kube import LIMITS, NS, give_uids
from tests.runtime.kubernetes.test_e2e_scenario_kmock import Controllers

pytestmark = pytest.mark.kmock(cls=kmock.KubernetesEmulator)

ROUTES = "gateway.networking.k8s.io/v1/httproutes"


@pytest.fixture
async def api(kmock: kmock.KubernetesEmulator) -> AsyncIterator[KubeApi]:
    give_uids(kmock)
    async with ApiClient(Configuration(host=str(kmock.url).rstrip("/"))) as client:
        yield KubeApi(client, timeout_s=5.0)


async def _tick(_seconds: float) -> None:
    await asyncio.sleep(0.01)


@pytest.fixture
async def rig(
    storage: Storage, tmp_path: Path, kmock: kmock.KubernetesEmulator, api: KubeApi
) -> AsyncIterator[Rig]:
    driver = KubernetesDriver(api, LIMITS, lambda _release: "t" * 32, sleep=_tick)
    router = GatewayRouter(api, LIMITS, NO_METRICS)
    cluster = Controllers(kmock)

    async def controllers() -> None:
        while True:
            await cluster.reconcile()
            await asyncio.sleep(0.01)

    running = asyncio.create_task(controllers())
    try:
        yield await make_rig(storage, tmp_path, driver, router)  # type: ignore[arg-type]
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await router.close()


def _deployments(mock: kmock.KubernetesEmulator) -> dict[str, int]:
    """Live Deployments: name -> replicas."""
    return {
        key[2]: int(mock.objects[key]["spec"]["replicas"])
        for key in list(mock.objects)
        if key[0].plural == "deployments" and not mock.objects[key].deleted
    }


def _weights(mock: kmock.KubernetesEmulator, rig: Rig) -> list[tuple[str, int]]:
    route = mock.objects[ROUTES, NS, "app-shop--acme"]
    refs = route["spec"]["rules"][0]["backendRefs"]
    return [(ref["name"], ref["weight"]) for ref in refs]


async def test_deploy_restart_and_scale_through_the_engine(
    rig: Rig, kmock: kmock.KubernetesEmulator
) -> None:
    await rig.spec(instances=1)
    assert await rig.deploy("rolling") == "live"
    assert _deployments(kmock) == {"app-shop--acme-r1": 1}
    assert _weights(kmock, rig) == [("app-shop--acme-r1", 100)]

    record = await rig.deploys.restart(await rig.app(), by=rig.alice.user)
    assert (record.number, record.state) == (2, "live")
    assert await rig.states() == {1: "superseded", 2: "live"}
    assert _deployments(kmock) == {"app-shop--acme-r2": 1}  # r1 stopped whole
    assert _weights(kmock, rig) == [("app-shop--acme-r2", 100)]

    await rig.deploys.scale(await rig.app(), 3, by=rig.alice)
    assert _deployments(kmock) == {"app-shop--acme-r2": 3}
    await rig.deploys.scale(await rig.app(), 1, by=rig.alice)
    assert _deployments(kmock) == {"app-shop--acme-r2": 1}
    assert _weights(kmock, rig) == [("app-shop--acme-r2", 100)]
