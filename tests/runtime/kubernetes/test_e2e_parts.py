"""The pieces ``make k8s-e2e`` puts into a cluster, checked here without one: the source
server's objects against Kubernetes 1.34's schemas (strict), the source server and the e2e app
run as their pods run them (the same scripts, on this host), and the run's settings.

Not proved here: that the base image runs them, that the init container's ``curl`` and ``tar``
in the image unpack the tar (podman's lane plays a rendered pod), or anything of a cluster.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import kmock
import kubernetes_validate
import pytest

from appdeck.settings import Settings
from tests.k8s_e2e import cluster, preflight, scenario

KUBERNETES = "1.34"
WAIT_S = 15.0


def _run(monkeypatch: pytest.MonkeyPatch, **env: str) -> cluster.Run:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return cluster.run_from_env(Settings(kube_image="localhost/appdeck-base:e2e"))


def test_the_source_servers_objects_are_valid_and_hardened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _run(monkeypatch)
    objects = cluster.source_objects(run)

    assert [o["kind"] for o in objects] == ["Namespace", "ConfigMap", "Deployment", "Service"]
    for obj in objects:
        assert kubernetes_validate.validate(obj, KUBERNETES, strict=True) == KUBERNETES
    tar = base64.b64decode(objects[1]["binaryData"]["workspace.tar"])
    assert tar == scenario.workspace_tar()
    assert len(tar) < 1 << 20  # a ConfigMap holds 1 MiB
    pod = objects[2]["spec"]["template"]
    # the app's NetworkPolicy lets the init container reach AppDeck's pods, so these are
    assert pod["metadata"]["labels"] == dict(run.limits.appdeck_pod_labels)
    assert objects[0]["metadata"]["name"] == run.limits.appdeck_namespace
    assert run.limits.source_url == f"http://appdeck-source.{run.source_namespace}.svc:8080"
    assert run.limits.source_port == cluster.SOURCE_PORT
    assert pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] is True
    assert run.namespaces == [f"appdeck-e2e-t-e2e{run.run}", f"appdeck-e2e-src-{run.run}"]


def test_the_run_is_refused_without_a_cluster_or_an_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(cluster.Refused, match="KUBECONFIG is not set"):
        cluster.run_from_env(Settings(kube_image="localhost/appdeck-base:e2e"))
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    with pytest.raises(cluster.Refused, match="APPDECK_KUBE_IMAGE is not set"):
        cluster.run_from_env(Settings())
    with pytest.raises(cluster.Refused, match="is not key=value"):
        _run(monkeypatch, APPDECK_E2E_GATEWAY_POD_LABELS="just-a-name")
    run = _run(
        monkeypatch,
        APPDECK_KUBE_GATEWAY="envoy-gateway-system/appdeck",
        APPDECK_E2E_GATEWAY_POD_LABELS="gateway.envoyproxy.io/owning-gateway-name=appdeck",
    )
    assert (run.limits.gateway_namespace, run.limits.gateway_name) == (
        "envoy-gateway-system",
        "appdeck",
    )
    assert run.limits.gateway_pod_labels == (
        ("gateway.envoyproxy.io/owning-gateway-name", "appdeck"),
    )
    assert run.limits.namespace_mode == "tenant"
    assert run.app_id > 2_000_000_000  # far from any real app: remove_app deletes by it


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _process(argv: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env={"PATH": os.environ["PATH"], **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=WAIT_S)
        if process.stdout is not None:
            process.stdout.close()


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    """The first answer of ``url`` within :data:`WAIT_S` (the server may not listen yet)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers), timeout=5.0
            ) as answer:
                return int(answer.status), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_the_source_server_gives_the_workspace_to_the_releases_token_only(
    tmp_path: Path,
) -> None:
    (tmp_path / "workspace.tar").write_bytes(scenario.workspace_tar())
    port = _free_port()
    env = {"E2E_TAR": str(tmp_path / "workspace.tar"), "E2E_HOST": "127.0.0.1"}
    with _process(
        [sys.executable, "-c", cluster.SOURCE_SERVER], {**env, "E2E_PORT": str(port)}, tmp_path
    ):
        url = f"http://127.0.0.1:{port}/internal/releases/9-2/workspace.tar"
        assert _get(url, scenario.token("9-2")) == (200, scenario.workspace_tar())
        assert _get(url, scenario.token("9-1"))[0] == 401
        assert _get(url)[0] == 401
        assert _get(f"http://127.0.0.1:{port}/internal/releases/9-2/other", "x")[0] == 404


def test_the_e2e_app_answers_with_its_release_logs_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    with tarfile.open(fileobj=io.BytesIO(scenario.workspace_tar())) as tar:
        assert tar.getnames() == ["app.py"]
        tar.extractall(tmp_path, filter="data")
    port = _free_port()
    env = {"E2E_RELEASE": "r3", "PORT": str(port), "HOST": "127.0.0.1"}
    with _process([sys.executable, "app.py"], env, tmp_path) as app:
        assert _get(f"http://127.0.0.1:{port}/") == (200, b"release r3\n")
        assert _get(f"http://127.0.0.1:{port}{scenario.HEALTH}")[0] == 200
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=WAIT_S) == 0  # as PID 1 it would ignore SIGTERM without
        assert app.stdout is not None
        lines = app.stdout.read().splitlines()
    assert lines[0] == f"appdeck-e2e r3 listening on {port}"
    assert [line.split('"')[1] for line in lines[1:]] == ["GET / HTTP/1.1", "GET /healthz HTTP/1.1"]
    assert all(line.startswith("appdeck-e2e r3 ") for line in lines)


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: k, cluster: {{server: "{server}"}}}}]\n'
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "current-context: c\n"
    )
    return path


@pytest.mark.kmock(cls=kmock.KubernetesEmulator)
async def test_the_preflight_connects_through_kubeconfig_and_refuses_without_the_gateway_api(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = str(kmock.url).rstrip("/")
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", server)))
    kmock["get", "/version"] << {"gitVersion": "v1.34.1"}
    settings = Settings(kube_image="localhost/appdeck-base:e2e")
    run = cluster.run_from_env(settings)

    with pytest.raises(cluster.Refused, match="serves no Gateway API"):
        await cluster.connected(settings)
    kmock["get", cluster.GATEWAY_API] << {"kind": "APIResourceList", "resources": []}
    api = await cluster.connected(settings)
    async with api.client:
        assert await cluster.gateway_state(api, run.limits) == "missing"
    assert [f"{r.method.value} {r.url.path}" for r in list(kmock)][-3:] == [
        "GET /version",
        f"GET {cluster.GATEWAY_API}",
        f"GET {cluster.GATEWAY_API}/namespaces/appdeck-gateway/gateways/appdeck",
    ]
    # no cluster at the kubeconfig's address: refused, with the reason
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "nowhere", "http://127.0.0.1:9")))
    with pytest.raises(cluster.Refused, match="unreachable"):
        await cluster.connected(settings)


def test_make_k8s_e2e_refuses_without_kubeconfig(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert preflight.main() == 2
    assert "refused: KUBECONFIG is not set" in capsys.readouterr().err
