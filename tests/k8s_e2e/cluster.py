"""The real cluster of ``make k8s-e2e``: its settings, the checks before a run, the in-cluster
source server, traffic through the gateway, and the cleanup.

Settings (environment):

- ``KUBECONFIG`` (required; ``APPDECK_KUBE_CONTEXT`` picks a context): the cluster;
- ``APPDECK_KUBE_IMAGE`` (required): the base image, loaded into the cluster's nodes
  (``tests/k8s_e2e/Containerfile``; README, "Kubernetes (e2e against a real cluster)");
- ``APPDECK_KUBE_GATEWAY`` (``<namespace>/<name>``, default ``appdeck-gateway/appdeck``): the
  Gateway the HTTPRoute attaches to; ``APPDECK_E2E_GATEWAY_POD_LABELS`` (``k=v,k=v``): the
  labels of its proxy pods, which the app's NetworkPolicy admits (Envoy Gateway's:
  ``gateway.envoyproxy.io/owning-gateway-name=<name>``);
- ``APPDECK_E2E_GATEWAY_URL`` (optional): where this machine reaches that Gateway's HTTP
  listener (a ``kubectl port-forward``); unset, the routing half checks the HTTPRoute's
  weights only and says so;
- ``APPDECK_KUBE_METRICS_URL`` (optional): the gateway proxy's ``/stats/prometheus``; set, the
  canary's windows must count requests to r2's backend;
- ``APPDECK_APPS_DOMAIN`` (default ``localhost``): the app's hostname is ``<app>--<tenant>.<it>``.

The workspace is served **inside the cluster**: a Deployment of the base image in the run's own
"AppDeck" namespace (``appdeck-e2e-src-<run>``, its pods labelled as AppDeck's, so the app's
NetworkPolicy lets the init container reach it) answers
``/internal/releases/<id>/workspace.tar`` to the release's token from a ConfigMap. No address
of this machine has to be reachable from the pods, so any cluster works, a cloud's included.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import secrets
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import httpx

from appdeck.common.types import JsonObject
from appdeck.runtime.kubernetes.api import KubeApi, KubeError
from appdeck.runtime.kubernetes.config import connect
from appdeck.runtime.kubernetes.limits import ClusterLimits
from appdeck.settings import Settings
from tests.k8s_e2e import scenario

PREFIX: Final = "appdeck-e2e"
"""Every namespace a run makes starts with it (the tenant's: ``appdeck-e2e-t-e2e<run>``)."""
STALE_S: Final = 3600.0
"""A namespace of an earlier run this old is swept (a run killed before its cleanup)."""
SOURCE: Final = "appdeck-source"
SOURCE_PORT: Final = 8080
CONNECT_S: Final = 10.0
GATEWAY_API: Final = "/apis/gateway.networking.k8s.io/v1"
SOURCE_SERVER: Final = """
import os, re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TAR = open(os.environ.get("E2E_TAR", "/srv/workspace.tar"), "rb").read()
PATH = re.compile(r"/internal/releases/([0-9]+-[0-9]+)/workspace[.]tar")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        found = PATH.fullmatch(self.path)
        if found is None:
            return self.send_error(404)
        if self.headers.get("Authorization") != "Bearer appdeck-e2e-source-" + found.group(1):
            return self.send_error(401)
        self.send_response(200)
        self.send_header("Content-Length", str(len(TAR)))
        self.end_headers()
        self.wfile.write(TAR)


ADDRESS = (os.environ.get("E2E_HOST", "0.0.0.0"), int(os.environ.get("E2E_PORT", "8080")))
ThreadingHTTPServer(ADDRESS, Handler).serve_forever()
"""
"""The source server: the token is :func:`scenario.token`'s (AppDeck's real endpoint checks an
HMAC of the release; this one only has to refuse a wrong token). ``E2E_*`` are for running it
outside the cluster (``tests/runtime/kubernetes/test_e2e_parts.py``)."""


class Refused(Exception):
    """The run cannot start: the message says what is missing and how to get it."""


@dataclass(frozen=True)
class Run:
    """One run's names and settings."""

    run: str
    limits: ClusterLimits
    gateway_url: str | None
    metrics_url: str | None

    @property
    def app_id(self) -> int:
        """Far above any real app's id: ``remove_app`` deletes by it in every namespace."""
        return 2_000_000_000 + int(self.run, 16)

    @property
    def tenant(self) -> str:
        return f"e2e{self.run}"

    @property
    def source_namespace(self) -> str:
        return f"{PREFIX}-src-{self.run}"

    @property
    def namespaces(self) -> list[str]:
        return [f"{PREFIX}-t-{self.tenant}", self.source_namespace]


def run_from_env(settings: Settings) -> Run:
    """This run's names (random) and the settings above; :class:`Refused` names what is
    missing."""
    if not os.environ.get("KUBECONFIG"):
        raise Refused("KUBECONFIG is not set: point it at the cluster's kubeconfig")
    if not settings.kube_image:
        raise Refused(
            "APPDECK_KUBE_IMAGE is not set: build the base image (tests/k8s_e2e/Containerfile)"
            ", load it into the cluster and name it here"
        )
    run = secrets.token_hex(3)
    gateway_namespace, sep, gateway = settings.kube_gateway.partition("/")
    if not sep:
        raise Refused("APPDECK_KUBE_GATEWAY must be <namespace>/<name>")
    pod_labels = os.environ.get(
        "APPDECK_E2E_GATEWAY_POD_LABELS", f"gateway.networking.k8s.io/gateway-name={gateway}"
    )
    limits = ClusterLimits(
        image=settings.kube_image,
        source_url=f"http://{SOURCE}.{PREFIX}-src-{run}.svc:{SOURCE_PORT}",
        namespace=PREFIX,
        gateway_name=gateway,
        gateway_namespace=gateway_namespace,
        gateway_pod_labels=tuple(_pair(item) for item in pod_labels.split(",") if item),
        appdeck_namespace=f"{PREFIX}-src-{run}",
        domain=settings.apps_domain or "localhost",
    )
    return Run(
        run,
        limits,
        os.environ.get("APPDECK_E2E_GATEWAY_URL") or None,
        settings.kube_metrics_url,
    )


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep:
        raise Refused(f"APPDECK_E2E_GATEWAY_POD_LABELS: {item!r} is not key=value")
    return key, value


async def connected(settings: Settings) -> KubeApi:
    """The API of ``KUBECONFIG``'s cluster, checked: it answers ``/version`` and serves the
    Gateway API (the router writes HTTPRoutes); :class:`Refused` otherwise."""
    if settings.kube_config is None and os.environ.get("KUBECONFIG"):
        # kubernetes_asyncio reads $KUBECONFIG when it is imported, not when it loads
        settings = settings.model_copy(update={"kube_config": Path(os.environ["KUBECONFIG"])})
    try:
        api = await asyncio.wait_for(connect(settings), CONNECT_S)
    except Exception as exc:  # a kubeconfig that does not load: say which and why
        raise Refused(f"cannot load the kubeconfig in KUBECONFIG: {exc}") from exc
    api.timeout_s = CONNECT_S
    try:
        version = await api.call("GET", "/version")
    except KubeError as exc:
        await api.client.close()
        raise Refused(f"the cluster in KUBECONFIG is unreachable: {exc}") from exc
    try:
        await api.call("GET", GATEWAY_API)
    except KubeError as exc:
        await api.client.close()
        if exc.status != 404:
            raise Refused(f"the cluster in KUBECONFIG does not answer: {exc}") from exc
        raise Refused(
            "the cluster serves no Gateway API (gateway.networking.k8s.io/v1): install its "
            "CRDs (README, 'Kubernetes (e2e against a real cluster)')"
        ) from exc
    print(f"k8s-e2e: cluster {version.get('gitVersion')} at {api.client.configuration.host}")
    return api


async def gateway_state(api: KubeApi, limits: ClusterLimits) -> str:
    """Whether the Gateway the route attaches to exists, and its ``Programmed`` condition."""
    path = f"{GATEWAY_API}/namespaces/{limits.gateway_namespace}/gateways/{limits.gateway_name}"
    try:
        gateway = await api.call("GET", path)
    except KubeError as exc:
        if exc.status == 404:
            return "missing"
        raise
    for condition in (gateway.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Programmed":
            return f"Programmed={condition.get('status')}"
    return "no Programmed condition"


async def sweep(api: KubeApi) -> None:
    """Delete the namespaces of earlier runs older than :data:`STALE_S`."""
    found = await api.call("GET", "/api/v1/namespaces")
    for item in found.get("items") or []:
        meta = item["metadata"]
        born = datetime.fromisoformat(str(meta.get("creationTimestamp")).replace("Z", "+00:00"))
        age = (datetime.now(UTC) - born).total_seconds()
        if meta["name"].startswith(f"{PREFIX}-") and age > STALE_S:
            await _delete_namespace(api, meta["name"])


def source_objects(run: Run) -> list[JsonObject]:
    """The source server's objects, in the order to create them: its namespace, the workspace
    as a ConfigMap, a Deployment of the base image serving it, and its Service."""
    ns = run.source_namespace
    labels = dict(run.limits.appdeck_pod_labels)
    meta = {"name": SOURCE, "namespace": ns, "labels": labels}
    tar = base64.b64encode(scenario.workspace_tar()).decode()
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "binaryData": {"workspace.tar": tar},
        },
        _server(run, meta),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "selector": labels,
                "ports": [{"name": "http", "port": SOURCE_PORT, "targetPort": SOURCE_PORT}],
            },
        },
    ]


_COLLECTIONS: Final = {
    "Namespace": "/api/v1/namespaces",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
}


async def serve_source(api: KubeApi, run: Run, *, ready_s: float = 180.0) -> None:
    """Create :func:`source_objects`; return when a server pod is Ready (bounded)."""
    ns = run.source_namespace
    for obj in source_objects(run):
        await api.call("POST", _COLLECTIONS[obj["kind"]].format(ns=ns), body=obj)
    deadline = time.monotonic() + ready_s
    selector = ",".join(f"{k}={v}" for k, v in run.limits.appdeck_pod_labels)
    while True:
        pods = await api.call(
            "GET", f"/api/v1/namespaces/{ns}/pods", query={"labelSelector": selector}
        )
        if any(_ready(p) for p in pods.get("items") or []):
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"the source server is not Ready in {ready_s:g} s: {pods}")
        await asyncio.sleep(1.0)


def _server(run: Run, meta: JsonObject) -> JsonObject:
    hardened = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": meta["labels"]},
            "template": {
                "metadata": {"labels": meta["labels"]},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "server",
                            "image": run.limits.image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["python3", "-c", SOURCE_SERVER],
                            "ports": [{"containerPort": SOURCE_PORT}],
                            "readinessProbe": {"tcpSocket": {"port": SOURCE_PORT}},
                            "securityContext": hardened,
                            "volumeMounts": [{"name": "tar", "mountPath": "/srv"}],
                        }
                    ],
                    "volumes": [{"name": "tar", "configMap": {"name": SOURCE}}],
                },
            },
        },
    }


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def cleanup(api: KubeApi, run: Run, *, within_s: float = 120.0) -> list[str]:
    """Delete the run's namespaces (what the driver left in the tenant's goes with it) and wait,
    bounded, until they are gone; the names still terminating then."""
    for name in run.namespaces:
        await _delete_namespace(api, name)
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for name in run.namespaces:
            with contextlib.suppress(KubeError):
                await api.call("GET", f"/api/v1/namespaces/{name}")
                left.append(name)
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(2.0)


async def _delete_namespace(api: KubeApi, name: str) -> None:
    try:
        await api.call("DELETE", f"/api/v1/namespaces/{name}")
    except KubeError as exc:
        if exc.status != 404:
            raise


class GatewayTraffic:
    """:class:`scenario.Traffic` over HTTP to the gateway's listener, by ``Host`` header."""

    def __init__(self, url: str, *, concurrency: int = 8) -> None:
        self.client = httpx.AsyncClient(base_url=url, timeout=5.0)
        self.concurrency = concurrency

    async def answers(self, host: str, n: int) -> Counter[str]:
        counted: Counter[str] = Counter()
        gate = asyncio.Semaphore(self.concurrency)

        async def one() -> None:
            async with gate:
                try:
                    answer = await self.client.get("/", headers={"Host": host})
                except httpx.HTTPError as exc:
                    counted[type(exc).__name__] += 1
                    return
                text = answer.text.strip()
                if answer.status_code == 200 and text.startswith("release "):
                    counted[text.removeprefix("release ")] += 1
                else:
                    counted[f"status {answer.status_code}"] += 1

        await asyncio.gather(*(one() for _ in range(n)))
        return counted

    async def close(self) -> None:
        await self.client.aclose()
