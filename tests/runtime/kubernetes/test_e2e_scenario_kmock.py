"""``make k8s-e2e``'s scenario (``tests/k8s_e2e/scenario.py``) run against kmock, so that it
runs on every ``make test`` and cannot rot between two runs on a real cluster.

The test is the controllers (:class:`Controllers`): a ReplicaSet making a Deployment's pods
Ready, the garbage collector deleting the pods of a deleted Deployment, the kubelet answering
``pods/log`` with the lines the e2e app prints (a startup line, then one per readiness probe).

What this does **not** prove (only ``make k8s-e2e`` does): that the init container fetches the
workspace and the app starts in the base image, that Pod Security ``restricted`` admits the
pods and the tenant's Namespace (kmock cannot serve ``/api/v1/namespaces``: this runs in the
``shared`` mode), that a gateway follows the HTTPRoute's weights (no traffic is measured here),
that the gateway's metrics count per backend, that pods go after a real grace period, or any
timing. kmock's other gaps are pinned in ``test_kmock_conversations.test_kmock_gaps``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import kmock
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from appdeck.model.release import AppSpec, Release
from appdeck.runtime.kubernetes.api import KubeApi
from appdeck.runtime.kubernetes.driver import KubernetesDriver
from appdeck.runtime.kubernetes.metrics import NO_METRICS
from appdeck.runtime.kubernetes.router import GatewayRouter
from tests.k8s_e2e import scenario
from tests.runtime.kubernetes.kube import LIMITS, NS, TENANT, calls, give_uids, pod

pytestmark = pytest.mark.kmock(cls=kmock.KubernetesEmulator)

APP_ID = 7
BOUNDS = scenario.Bounds(ready_s=5.0, gone_s=5.0, logs_s=5.0, poll_s=0.01)
"""Every wait of the scenario still bounded, shorter: nothing here waits on a kubelet."""
T0 = datetime(2026, 11, 27, 17, 0, tzinfo=UTC)


class Controllers:
    """What a cluster's controllers and kubelets do, done by the test on kmock's store."""

    def __init__(self, mock: kmock.KubernetesEmulator) -> None:
        self.mock = mock
        self.logs: dict[str, list[str]] = {}
        """pod name -> its lines so far (``<RFC 3339 ns> <text>``)."""
        mock["get", kmock.subresource("log")] << self._pods_log

    async def reconcile(self) -> None:
        """ReplicaSets and the garbage collector: each Deployment has ``replicas`` Ready pods
        named ``<deployment>-<i>``; a pod whose release has no Deployment is deleted."""
        deployments = {key[2]: self.mock.objects[key] for key in self._live("deployments")}
        wanted: dict[str, dict[str, Any]] = {}
        for name, deployment in deployments.items():
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            rel = Release(
                int(labels["appdeck.dev/app-id"]),
                labels["appdeck.dev/app"],
                int(labels["app.kubernetes.io/version"].removeprefix("r")),
                AppSpec(),
                route=labels["app.kubernetes.io/instance"],
            )
            for i in range(int(deployment["spec"]["replicas"])):
                made = pod(rel, i)
                assert made["metadata"]["name"] == f"{name}-{i}"
                wanted[made["metadata"]["name"]] = made
        for key in self._live("pods"):
            if key[2] not in wanted:
                del self.mock.objects[key]
        for name, made in wanted.items():
            if ("v1/pods", NS, name) not in self.mock.objects or self.mock.objects[
                "v1/pods", NS, name
            ].deleted:
                self.mock.objects["v1/pods", NS, name] = made

    async def forever(self, every_s: float = 0.01) -> None:
        """:meth:`reconcile` until cancelled (a fixture's background task)."""
        while True:
            await self.reconcile()
            await asyncio.sleep(every_s)

    def _live(self, plural: str) -> list[Any]:
        return [
            key
            for key in list(self.mock.objects)
            if key[0].plural == plural and not self.mock.objects[key].deleted
        ]

    def _pods_log(self, request: Any) -> bytes:
        """The kubelet: the app's startup line, then a probe's line per read (time goes on
        0.7 s a line); ``sinceTime`` in whole seconds and ``tailLines`` as the API takes them."""
        assert request.params["timestamps"] == "true"
        assert request.params["container"] == "app"
        name = str(request.name)
        number = name.rsplit("-", 2)[-2]  # app-hello--acme-r2-0
        lines = self.logs.setdefault(name, [])
        text = (
            f"appdeck-e2e {number} listening on 8080"
            if not lines
            else f'appdeck-e2e {number} "GET /healthz HTTP/1.1" 200 -'
        )
        at = T0 + timedelta(seconds=0.7 * len(lines))
        lines.append(f"{at.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {text}")
        shown = lines
        if "sinceTime" in request.params:
            shown = [line for line in shown if line[:19] >= request.params["sinceTime"][:19]]
        if "tailLines" in request.params:
            shown = shown[-int(request.params["tailLines"]) :]
        return "".join(f"{line}\n" for line in shown).encode()


@pytest.fixture
async def api(kmock: kmock.KubernetesEmulator) -> AsyncIterator[KubeApi]:
    give_uids(kmock)
    async with ApiClient(Configuration(host=str(kmock.url).rstrip("/"))) as client:
        yield KubeApi(client, timeout_s=5.0)


async def _no_sleep(_seconds: float) -> None:
    await asyncio.sleep(0)


async def test_the_k8s_e2e_scenario_runs_against_kmock(
    kmock: kmock.KubernetesEmulator, api: KubeApi
) -> None:
    router = GatewayRouter(api, LIMITS, NO_METRICS)
    harness = scenario.Harness(
        api=api,
        limits=LIMITS,
        tenant=TENANT,
        app_id=APP_ID,
        cluster=Controllers(kmock),
        new_driver=lambda: KubernetesDriver(
            api, LIMITS, lambda rel: scenario.token(rel.release_id), sleep=_no_sleep
        ),
        router=router,
        bounds=BOUNDS,
    )
    try:
        await scenario.run(harness)
    finally:
        await router.close()

    said = [line.split(" in ")[0] if "→ ready" in line else line for line in harness.said]
    assert said == [
        "r1 start → ready",
        "route r1 100: HTTPRoute weights checked (no gateway: no traffic measured)",
        "r2 (2 instances) start → ready",
        "route r2 10 / r1 90: HTTPRoute weights checked (no gateway: no traffic measured)",
        "route r2 50 / r1 50: HTTPRoute weights checked (no gateway: no traffic measured)",
        "route r2 100: HTTPRoute weights checked (no gateway: no traffic measured)",
        "stop r1: nothing labelled with r1 left (pods and ReplicaSets included)",
        "logs: 2 lines, then 2 after the cursor, none twice",
        "recover: a fresh driver adopted r2's 2 instances from labels",
        "remove_app: nothing labelled with the app left (pods and ReplicaSets included)",
    ]
    made = calls(kmock)
    # the canary's route writes: the first a POST, then one merge patch per step
    assert made.count("POST httproutes") == 1
    assert made.count("PATCH httproutes/app-hello--acme") == 3
    assert made.count("DELETE httproutes/app-hello--acme") == 1
    left = [key for key in kmock.objects if not kmock.objects[key].deleted]
    assert left == []
