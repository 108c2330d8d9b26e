"""The Kubernetes driver's parts that need no conversation: its settings and connection, the
pod status it reads into words, and the gateway metrics the canary analysis reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from appdeck.runtime.kubernetes import status
from appdeck.runtime.kubernetes.config import connect, limits_from, router_from
from appdeck.runtime.kubernetes.metrics import NO_METRICS, PrometheusBackendMetrics, counts_in
from appdeck.settings import InvalidSetting, Settings
from tests.runtime.kubernetes.kube import TOKEN, pod, release

pytestmark = pytest.mark.kmock(cls=kmock.KubernetesEmulator)

REQUIRED = {"kube_image": "registry.local/base:1", "kube_source_url": "http://appdeck.sys:8080"}


async def test_connect_reads_a_kubeconfig(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "k", "cluster": {"server": str(kmock.url).rstrip("/")}}],
                "users": [{"name": "u", "user": {"token": TOKEN}}],
                "contexts": [
                    {"name": "other", "context": {"cluster": "k", "user": "none"}},
                    {"name": "c", "context": {"cluster": "k", "user": "u"}},
                ],
                "current-context": "other",
            }
        )
    )
    settings = Settings(runtime="kubernetes", kube_config=kubeconfig, kube_context="c", **REQUIRED)

    api = await connect(settings)
    try:
        assert await api.list("Pod", "appdeck", {}) == []
    finally:
        await api.client.close()

    sent = list(kmock)[-1]
    assert sent.headers["Authorization"] == f"Bearer {TOKEN}"
    assert sent.url.path == "/api/v1/namespaces/appdeck/pods"


def test_limits_come_from_the_settings_and_name_what_is_missing() -> None:
    limits = limits_from(
        Settings(
            runtime="kubernetes",
            kube_gateway="edge/public",
            apps_domain="apps.example.com",
            kube_namespace_mode="shared",
            **REQUIRED,
        )
    )
    assert (limits.gateway_namespace, limits.gateway_name) == ("edge", "public")
    assert limits.gateway_pod_labels == (("gateway.networking.k8s.io/gateway-name", "public"),)
    assert (limits.namespace_mode, limits.domain, limits.source_port) == (
        "shared",
        "apps.example.com",
        8080,
    )
    for settings, named in (
        (Settings(runtime="kubernetes"), "APPDECK_KUBE_IMAGE"),
        (Settings(runtime="kubernetes", kube_image="i"), "APPDECK_KUBE_SOURCE_URL"),
        (
            Settings(runtime="kubernetes", kube_gateway="nogateway", **REQUIRED),
            "APPDECK_KUBE_GATEWAY",
        ),
    ):
        with pytest.raises(InvalidSetting) as caught:
            limits_from(settings)
        assert caught.value.name == named


async def test_the_router_reads_metrics_only_when_a_url_is_set(
    kmock: kmock.KubernetesEmulator,
) -> None:
    settings = Settings(runtime="kubernetes", **REQUIRED)
    from appdeck.runtime.kubernetes.api import KubeApi

    api = KubeApi(None)  # type: ignore[arg-type]  # never called here
    assert router_from(settings, api).metrics is NO_METRICS
    scraped = router_from(
        settings.model_copy(update={"kube_metrics_url": "http://gw:19001/stats/prometheus"}), api
    )
    assert isinstance(scraped.metrics, PrometheusBackendMetrics)
    await scraped.metrics.client.aclose()


ENVOY = """\
# TYPE envoy_cluster_upstream_rq_total counter
envoy_cluster_upstream_rq_total{envoy_cluster_name="httproute/appdeck/app-hello--acme/rule/0/backend/appdeck/app-hello--acme-r2/80"} 120
envoy_cluster_upstream_rq_total{envoy_cluster_name="httproute/appdeck/app-hello--acme/rule/0/backend/appdeck/app-hello--acme-r1/80"} 880
# TYPE envoy_cluster_upstream_rq_xx counter
envoy_cluster_upstream_rq_xx{envoy_response_code_class="2",envoy_cluster_name="httproute/appdeck/app-hello--acme/rule/0/backend/appdeck/app-hello--acme-r2/80"} 113
envoy_cluster_upstream_rq_xx{envoy_response_code_class="5",envoy_cluster_name="httproute/appdeck/app-hello--acme/rule/0/backend/appdeck/app-hello--acme-r2/80"} 7
envoy_cluster_upstream_rq_xx{envoy_response_code_class="5",envoy_cluster_name="httproute/appdeck/app-hello--acme/rule/0/backend/appdeck/app-hello--acme-r1/80"} 2
"""


async def test_gateway_metrics_are_summed_per_backend(kmock: kmock.KubernetesEmulator) -> None:
    assert counts_in(ENVOY, "envoy_cluster_name", "appdeck/app-hello--acme-r2/") == (120, 7)
    assert counts_in(ENVOY, "envoy_cluster_name", "appdeck/app-hello--acme-r1/") == (880, 2)
    assert counts_in(ENVOY, "envoy_cluster_name", "appdeck/app-other--acme-r1/") == (0, 0)
    kmock["get /stats/prometheus"] << ENVOY.encode()
    metrics = PrometheusBackendMetrics(f"{str(kmock.url).rstrip('/')}/stats/prometheus")
    try:
        assert await metrics.counts("appdeck", "app-hello--acme-r2") == (120, 7)
    finally:
        await metrics.client.aclose()


def test_pod_status_in_words() -> None:
    r1 = release(1)
    fetching: dict[str, Any] = pod(r1, ready=False)
    fetching["status"]["initContainerStatuses"] = [
        {"name": "source", "state": {"terminated": {"exitCode": 22, "reason": "Error"}}}
    ]
    pulling = pod(r1, ready=False, waiting="ImagePullBackOff")
    killed = pod(
        r1, ready=False, restarts=3, waiting="CrashLoopBackOff", last={"exitCode": 0, "signal": 9}
    )

    assert status.why_not_ready([fetching], "/") == (
        "the source fetch (init container) failed: status 22"
    )
    assert (
        status.why_not_ready([pulling], "/") == "the base image cannot be pulled (ImagePullBackOff)"
    )
    assert status.why_not_ready([killed, pulling], "/health") == (
        "CrashLoopBackOff: restarted 3 times, last exit signal KILL; "
        "the base image cannot be pulled (ImagePullBackOff)"
    )
    assert status.exit_words({"exitCode": 143}) == "signal TERM"
    assert status.exit_words({"exitCode": 200}) == "signal 72"
    assert status.exit_words({}) is None
    assert status.gave_up(killed, after=3)
    assert not status.gave_up(killed, after=4)
    gone = pod(r1)
    gone["metadata"]["deletionTimestamp"] = "2026-11-27T17:00:00Z"
    assert (status.ready(gone), status.state(gone)) == (False, "stopped")
