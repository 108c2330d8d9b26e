"""From ``APPDECK_RUNTIME=kubernetes`` settings to a connected driver and router.

``appdeck serve`` calls :func:`connected` before it opens anything (a cluster it cannot reach
is one line naming the setting), then :func:`driver_from` and :func:`router_from`
(``appdeck.kube_setup``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Final

import yaml
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from appdeck.runtime.kubernetes.api import KubeApi, KubeError
from appdeck.runtime.kubernetes.driver import KubernetesDriver, SourceTokens
from appdeck.runtime.kubernetes.limits import ClusterLimits
from appdeck.runtime.kubernetes.metrics import NO_METRICS, PrometheusBackendMetrics
from appdeck.runtime.kubernetes.router import BackendMetrics, GatewayRouter
from appdeck.settings import InvalidSetting, Settings


async def connect(settings: Settings) -> KubeApi:
    """An API client from ``APPDECK_KUBE_CONFIG`` (and ``_CONTEXT``), or in-cluster from the
    pod's service account when there is no kubeconfig setting and the pod runs in a cluster."""
    configuration = Configuration()
    if settings.kube_config is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        path = str(settings.kube_config) if settings.kube_config is not None else None
        await config.load_kube_config(
            config_file=path, context=settings.kube_context, client_configuration=configuration
        )
    return KubeApi(ApiClient(configuration))


CONNECT_S: Final = 10.0
"""Loading the kubeconfig and the API server's first answer (``/version``), each."""


async def connected(settings: Settings) -> KubeApi:
    """:func:`connect`, checked: the settings are complete (:func:`limits_from`) and the API
    server answers ``/version`` within :data:`CONNECT_S`. :class:`InvalidSetting` otherwise,
    in one line naming the setting to look at."""
    limits_from(settings)
    where = "APPDECK_KUBE_CONFIG" if settings.kube_config is not None else "KUBECONFIG"
    try:
        async with asyncio.timeout(CONNECT_S):
            api = await connect(settings)
    except (config.ConfigException, OSError, TimeoutError, ValueError, yaml.YAMLError) as exc:
        raise InvalidSetting(where, f"the kubeconfig does not load: {_line(exc)}") from None
    timeout, api.timeout_s = api.timeout_s, CONNECT_S
    try:
        await api.call("GET", "/version")
    except KubeError as exc:
        await api.client.close()
        host = api.client.configuration.host
        why = f"the API server at {host} does not answer: {_line(exc)}"
        raise InvalidSetting(where, why) from None
    api.timeout_s = timeout
    return api


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def limits_from(settings: Settings) -> ClusterLimits:
    """The operator's cluster settings; :class:`InvalidSetting` names the one that is wrong."""
    if not settings.kube_image:
        raise InvalidSetting("APPDECK_KUBE_IMAGE", "is required with APPDECK_RUNTIME=kubernetes")
    if not settings.kube_source_url:
        raise InvalidSetting(
            "APPDECK_KUBE_SOURCE_URL", "is required with APPDECK_RUNTIME=kubernetes"
        )
    gateway_namespace, sep, gateway = settings.kube_gateway.partition("/")
    if not sep:
        raise InvalidSetting("APPDECK_KUBE_GATEWAY", "must be <namespace>/<name>")
    try:
        return ClusterLimits(
            image=settings.kube_image,
            source_url=settings.kube_source_url,
            namespace_mode=settings.kube_namespace_mode,
            namespace=settings.kube_namespace,
            gateway_name=gateway,
            gateway_namespace=gateway_namespace,
            gateway_pod_labels=(("gateway.networking.k8s.io/gateway-name", gateway),),
            gateway_pods_namespace=settings.kube_gateway_pods_namespace,
            domain=settings.apps_domain or "localhost",
            max_source_mb=settings.max_source_mb,  # the pod's limit is the endpoint's
        )
    except ValueError as exc:
        raise InvalidSetting("APPDECK_KUBE_*", str(exc)) from None


def driver_from(settings: Settings, api: KubeApi, tokens: SourceTokens) -> KubernetesDriver:
    return KubernetesDriver(api, limits_from(settings), tokens)


def router_from(settings: Settings, api: KubeApi) -> GatewayRouter:
    metrics: BackendMetrics = NO_METRICS
    if settings.kube_metrics_url:
        metrics = PrometheusBackendMetrics(settings.kube_metrics_url)
    return GatewayRouter(api, limits_from(settings), metrics, poll_s=1.0)
