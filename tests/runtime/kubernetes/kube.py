"""Helpers for the API-conversation tests: kmock as the API server, the test as the controllers
(it writes the pods a ReplicaSet and a kubelet would, with the status they would report)."""

from __future__ import annotations

from typing import Any

import kmock

from appdeck.model.release import AppSpec, Release
from appdeck.runtime.kubernetes import names
from appdeck.runtime.kubernetes.limits import ClusterLimits

LIMITS = ClusterLimits(
    image="registry.local/appdeck-base:2026.11",
    source_url="http://appdeck.appdeck-system.svc:8080",
    namespace_mode="shared",
)
"""The shared namespace: kmock 0.8 cannot serve ``/api/v1/namespaces`` (it reads the word as a
namespace and answers 500; pinned in ``test_kmock_gaps``), so the tenant's Namespace is not part
of these conversations: in ``tenant`` mode, a tenant's first release adds one POST."""
TENANT = "acme"
ROUTE = "hello--acme"
NS = "appdeck"
TOKEN = "t" * 32


def release(number: int, *, instances: int = 1, app_id: int = 7) -> Release:
    return Release(
        app_id=app_id,
        app_name="hello",
        number=number,
        spec=AppSpec(instances=instances),
        env={"GREETING": f"hi {number}"},
        route=ROUTE,
    )


def call(request: Any) -> str:
    """One request as the tests pin it: ``METHOD plural[/name[/sub]]``, with the query that
    matters (a 409 answer is not visible here: the order of calls shows the retries)."""
    resource = request.resource
    what = resource.plural if resource is not None else request.url.path
    if request.name:
        what += f"/{request.name}"
    if request.subresource:
        what += f"/{request.subresource}"
    return f"{request.method.value} {what}"


def calls(mock: kmock.KubernetesEmulator, since: int = 0) -> list[str]:
    return [call(r) for r in list(mock)[since:]]


def count(mock: kmock.KubernetesEmulator) -> int:
    return len(list(mock))


def pod(
    rel: Release,
    i: int = 0,
    *,
    ready: bool = True,
    restarts: int = 0,
    waiting: str | None = None,
    last: dict[str, Any] | None = None,
    scheduled: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod of ``rel`` as the kubelet reports it."""
    app: dict[str, Any] = {"name": "app", "restartCount": restarts, "ready": ready}
    app["state"] = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    if last:
        app["lastState"] = {"terminated": last}
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled:
        conditions.append({"type": "PodScheduled", "status": "False", **scheduled})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{names.release_name(rel, TENANT)}-{i}",
            "namespace": NS,
            "uid": f"pod-{rel.release_id}-{i}",
            "labels": names.labels(rel, TENANT),
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "containerStatuses": [app],
            "startTime": "2026-11-27T17:00:00Z",
        },
    }


def run_pods(mock: kmock.KubernetesEmulator, rel: Release, **status: Any) -> None:
    """The ReplicaSet made the release's pods; the kubelet reports them."""
    for i in range(rel.spec.instances):
        obj = pod(rel, i, **status)
        mock.objects["v1/pods", NS, obj["metadata"]["name"]] = obj


def give_uids(mock: kmock.KubernetesEmulator) -> None:
    """Answer a Deployment's creation with a uid, as an API server does (kmock assigns none)."""

    def created(request: Any) -> dict[str, Any]:
        obj = dict(request.data)
        obj["metadata"] = {**obj["metadata"], "uid": f"uid-{obj['metadata']['name']}"}
        return obj

    mock["post", kmock.resource("apps/v1/deployments")] << created
