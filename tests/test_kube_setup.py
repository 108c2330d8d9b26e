"""``APPDECK_RUNTIME=kubernetes`` served (``appdeck.kube_setup``): a whole server
(``Services.start``) on kmock as the API server, driven through the MCP tools over ASGI.

The test is the cluster's controllers (``Controllers`` of the kmock scenario test: a
Deployment's pods made Ready, a deleted release's pods removed, the kubelet's ``pods/log``);
the release is built here for real (the local driver's ``prepare``, in the sandbox), its
workspace served at ``/internal/releases/<id>/workspace.tar`` to the token in its source
Secret. What kmock cannot show (an init container's fetch, a gateway following the weights,
Namespaces: this runs in the ``shared`` mode) is listed in docs/kubernetes.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from appdeck import kube_setup
from appdeck.runtime.kubernetes.api import KubeError
from appdeck.settings import Settings
from tests.runtime.kubernetes.kube import NS, give_uids
from tests.runtime.kubernetes.test_e2e_scenario_kmock import Controllers
from tests.support.wait import until
from tests.tools.conftest import HELLO, Caller, World, alice_at
from tests.tools.test_app_health import _until as status_once

pytestmark = pytest.mark.kmock(cls=kmock.KubernetesEmulator)

DOMAIN = "apps.example.test"
ROUTE = "app-hello--acme"


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "k", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t" * 32}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def kube_settings(tmp_path: Path, server: str) -> dict[str, Any]:
    return {
        "data_dir": tmp_path / "data",
        "source_roots": [tmp_path / "src"],
        "rate_limit_per_second": 0,
        "runtime": "kubernetes",
        "kube_config": kubeconfig(tmp_path / "kubeconfig", server),
        "kube_image": "registry.local/appdeck-base:2026.11",
        "kube_source_url": "http://appdeck.appdeck-system.svc:8080",
        "kube_namespace_mode": "shared",  # kmock cannot serve /api/v1/namespaces
        "kube_namespace": NS,
        "apps_domain": DOMAIN,
    }


@pytest.fixture
async def kube_world(
    tmp_path: Path, kmock: kmock.KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[World]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    give_uids(kmock)
    running = asyncio.create_task(Controllers(kmock).forever())
    source = tmp_path / "src" / "hello"
    shutil.copytree(HELLO, source)
    settings = Settings.model_validate(kube_settings(tmp_path, str(kmock.url).rstrip("/")))
    try:
        async with alice_at(settings, source) as world:
            yield world
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


def live(mock: kmock.KubernetesEmulator, plural: str) -> dict[str, dict[str, Any]]:
    """The objects of one kind kmock holds (not deleted), by name."""
    return {
        key[2]: dict(mock.objects[key])
        for key in list(mock.objects)
        if key[0].plural == plural and not mock.objects[key].deleted
    }


def weights(route: dict[str, Any]) -> dict[str, int]:
    refs = route["spec"]["rules"][0]["backendRefs"]
    return {ref["name"]: ref["weight"] for ref in refs}


def route_writes(mock: kmock.KubernetesEmulator) -> list[tuple[str, dict[str, int] | None]]:
    """Every write of the app's HTTPRoute, in order: POST/PATCH with its weights, DELETE."""
    written: list[tuple[str, dict[str, int] | None]] = []
    for request in list(mock):
        resource = request.resource
        if resource is None or resource.plural != "httproutes":
            continue
        method = request.method.value.upper()
        if method in ("POST", "PATCH"):
            written.append((method, weights(request.data)))
        elif method == "DELETE":
            written.append((method, None))
    return written


async def deploy(alice: Caller, app_id: int, strategy: str) -> dict[str, Any]:
    return await alice.ok("deploy_app", app_id=app_id, strategy=strategy, wait_seconds=60)


async def test_a_kubernetes_server_deploys_routes_canaries_logs_rolls_back_and_stops_an_app(
    kube_world: World, kmock: kmock.KubernetesEmulator
) -> None:
    world = kube_world
    assert world.services.ingress is None  # no HAProxy data plane for apps
    alice = await world.caller("alice")
    spec = {
        "source_path": str(world.source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "canary": {"percent": 50, "steps": [50, 100], "analysis_window_s": 0.2},
    }
    app_id = (await alice.ok("register_app", name="hello", spec=spec))["app_id"]

    first = await deploy(alice, app_id, "rolling")
    assert first["state"] == "live", first
    assert first["url"] == f"http://hello--acme.{DOMAIN}/"
    assert set(live(kmock, "secrets")) == {"app-hello--acme-r1-env", "app-hello--acme-r1-source"}
    assert set(live(kmock, "deployments")) == {"app-hello--acme-r1"}
    assert set(live(kmock, "services")) == {"app-hello--acme-r1"}
    assert set(live(kmock, "networkpolicies")) == {ROUTE}
    route = live(kmock, "httproutes")[ROUTE]
    assert route["spec"]["hostnames"] == [f"hello--acme.{DOMAIN}"]
    assert weights(route) == {"app-hello--acme-r1": 100}
    url = await alice.ok("get_app_url", app_id=app_id)
    assert url["url"] == f"http://hello--acme.{DOMAIN}/", url
    assert "localhost" not in str(url)  # no URL on this host: the gateway serves the app
    live_api = await alice.tool("discover_apis", app_id=app_id, source="live")
    error = live_api["structuredContent"]["error"]  # through this host's ingress: none here
    assert (error["code"], "get_app_url" in error["hint"]) == ("failed_precondition", True), error
    status = await status_once(alice, app_id, lambda s: s["instances"]["up"] == 1)
    assert status["state"] == "running", status  # the pods as last read from the cluster

    # the pod's init container fetches the workspace built here with its source Secret's token
    secret = live(kmock, "secrets")["app-hello--acme-r1-source"]
    token = base64.b64decode(secret["data"]["token"]).decode()
    release_id = f"{app_id}-1"
    tar = await world.client.get(
        f"/internal/releases/{release_id}/workspace.tar",
        headers={"authorization": f"Bearer {token}"},
    )
    assert tar.status_code == 200, tar.text
    assert b"app.py" in tar.content
    other = await world.client.get(
        f"/internal/releases/{release_id}/workspace.tar",
        headers={"authorization": "Bearer " + "0" * 64},
    )
    assert other.status_code == 401

    before = len(route_writes(kmock))
    second = await deploy(alice, app_id, "canary")
    assert second["state"] == "live", second
    canary = [w for _, w in route_writes(kmock)[before:]]
    assert {"app-hello--acme-r2": 50, "app-hello--acme-r1": 50} in canary, canary
    assert canary[-1] == {"app-hello--acme-r2": 100}, canary
    assert set(live(kmock, "deployments")) == {"app-hello--acme-r2"}  # r1 stopped whole

    logs = await alice.ok("tail_deploy_logs", app_id=app_id, kind="runtime", lines=50)
    assert any("listening on 8080" in line["text"] for line in logs["lines"]), logs
    build = await alice.ok("tail_deploy_logs", app_id=app_id, number=2, kind="build")
    assert build["lines"], build  # the build ran here, its log is this host's

    rolled = await alice.ok("rollback_deploy", app_id=app_id)
    assert rolled["state"] == "live", rolled
    [(_, back)] = live(kmock, "httproutes").items()
    [(name, weight)] = weights(back).items()
    assert weight == 100
    assert name != "app-hello--acme-r2"
    # the release that lost traffic is stopped aside: it may still exist when the tool answers
    await until(lambda: set(live(kmock, "deployments")) == {name})

    refused = await alice.tool("manage_app", app_id=app_id, action="update", name="hello2")
    assert refused["structuredContent"]["error"]["code"] == "failed_precondition"
    domains = {"domains": ["shop.example.test"]}  # not on the gateway: refused, not claimed
    assert await alice.error("set_app_spec", app_id=app_id, spec=domains) == "invalid_argument"

    stopped = await alice.ok("restart_app", app_id=app_id, action="stop")
    assert (stopped["app_stopped"], stopped["running_instances"]) == (True, 0)
    assert live(kmock, "httproutes") == {}  # the gateway answers 404
    assert live(kmock, "deployments") == {}
    assert route_writes(kmock)[-1] == ("DELETE", None)


async def test_the_servers_pod_reads_go_on_after_a_failed_one_until_it_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube_setup, "READ_PODS_S", 0.01)
    stopping = asyncio.Event()
    reads: list[int] = []

    class Runner:
        async def refresh(self) -> None:
            reads.append(len(reads))
            if len(reads) == 1:
                raise KubeError(0, "timeout")
            if len(reads) == 3:
                stopping.set()

    async with asyncio.timeout(10):
        await kube_setup.pod_reads(Runner())(stopping)  # type: ignore[arg-type]
    assert reads == [0, 1, 2]
