"""The Kubernetes driver and the Gateway router against the real cluster in ``KUBECONFIG``
(``make k8s-e2e``; README, "Kubernetes (e2e against a real cluster)"). Not collected by
``make test``: ``tests/k8s_e2e`` is in pytest's ``norecursedirs``.

It never skips: without a cluster it fails with what is missing (``make k8s-e2e`` refuses
before, with the same words). The scenario is ``scenario.py``'s, which the normal suite also runs
against kmock (``tests/runtime/kubernetes/test_e2e_scenario_kmock.py``); here the cluster's
controllers, kubelets and gateway do the work the kmock test does by hand. The run's namespaces
are deleted afterwards, also when it fails.
"""

from __future__ import annotations

import httpx
import pytest

from appdeck.runtime.kubernetes.api import KubeApi
from appdeck.runtime.kubernetes.driver import KubernetesDriver
from appdeck.runtime.kubernetes.metrics import NO_METRICS, PrometheusBackendMetrics
from appdeck.runtime.kubernetes.router import BackendMetrics, GatewayRouter
from appdeck.settings import Settings
from tests.k8s_e2e import cluster, scenario


async def test_deploy_canary_logs_recover_and_remove_on_a_real_cluster() -> None:
    settings = Settings()
    try:
        run = cluster.run_from_env(settings)
        api = await cluster.connected(settings)
    except cluster.Refused as exc:
        refused = str(exc)
    else:
        refused = ""
    if refused:
        pytest.fail(f"make k8s-e2e: refused: {refused}", pytrace=False)
    async with api.client:
        await _scenario(api, run)


async def _scenario(api: KubeApi, run: cluster.Run) -> None:
    await cluster.sweep(api)
    gateway = await cluster.gateway_state(api, run.limits)
    where = f"{run.limits.gateway_namespace}/{run.limits.gateway_name}"
    print(f"k8s-e2e: run {run.run}, gateway {where}: {gateway}")
    traffic = cluster.GatewayTraffic(run.gateway_url) if run.gateway_url else None
    scrapes = httpx.AsyncClient(timeout=5.0)
    metrics: BackendMetrics = NO_METRICS
    if run.metrics_url:
        metrics = PrometheusBackendMetrics(run.metrics_url, client=scrapes)
    router = GatewayRouter(api, run.limits, metrics)
    try:
        await cluster.serve_source(api, run)
        harness = scenario.Harness(
            api=api,
            limits=run.limits,
            tenant=run.tenant,
            app_id=run.app_id,
            cluster=_Controllers(),
            new_driver=lambda: KubernetesDriver(
                api, run.limits, lambda rel: scenario.token(rel.release_id)
            ),
            router=router,
            traffic=traffic,
            metrics=run.metrics_url is not None,
        )
        await scenario.run(harness)
    finally:
        try:  # the cleanup runs whatever closing the router raises (its last write's error)
            await router.close()
            if traffic is not None:
                await traffic.close()
            await scrapes.aclose()
        finally:
            left = await cluster.cleanup(api, run)
            if left:
                print(f"k8s-e2e: still terminating after the bound: {left}")


class _Controllers:
    """A real cluster's controllers run by themselves."""

    async def reconcile(self) -> None:
        return None
