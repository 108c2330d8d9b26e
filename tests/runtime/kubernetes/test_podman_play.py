"""A hardened Deployment and its Service, played by this host's podman, answer over HTTP.

The pod is the one a real AppDeck release will have: the source from a ConfigMap, read-only,
at ``/app``; a non-root uid; a read-only root filesystem with a ``/tmp`` of its own; every
capability dropped; no privilege escalation; seccomp ``RuntimeDefault``; no service account
token; resource limits. Where podman cannot run it, the test says why: it fails in CI and is
skipped, with the reason, elsewhere (``-ra`` prints it); it never passes without running.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.kubernetes.podman import Podman, wait_http

pytestmark = pytest.mark.podman

HELLO = Path(__file__).resolve().parents[2] / "fixtures" / "apps" / "hello" / "app.py"
APP_UID = 200_001
PROBE = """
import json, os
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines())
def writable(directory):
    try:
        with open(os.path.join(directory, ".probe"), "w"):
            return "writable"
    except OSError:
        return "read-only"
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    **{key: status[key].strip() for key in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")},
    "root": writable("/"), "app": writable("/app"), "tmp": writable("/tmp"),
    "token": os.path.exists("/var/run/secrets/kubernetes.io"),
}))
"""
"""Run in the pod: what confines it, as the pod's process sees it."""


@pytest.fixture(scope="module")
def podman() -> Podman:
    podman = Podman()
    problem = podman.problem()
    if problem is not None:
        message = f"podman cannot run a pod on this host: {problem}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return podman


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def hello_objects(name: str, image: str, port: int) -> list[dict[str, Any]]:
    """A ConfigMap of the fixture app, a Deployment of it hardened as AppDeck's will be, and
    its Service."""
    labels = {"app.kubernetes.io/name": name, "appdeck.dev/release": "1"}
    container = {
        "name": "app",
        "image": image,
        "command": ["/usr/bin/python3", "/app/app.py"],
        "env": [{"name": "PORT", "value": str(port)}, {"name": "HOST", "value": "0.0.0.0"}],
        # podman 4.3 publishes every containerPort on the host (at hostPort, else at the
        # same number; on hostIP, else on every address): said here, on loopback only
        "ports": [{"name": "http", "containerPort": port, "hostPort": port, "hostIP": "127.0.0.1"}],
        "resources": {
            "requests": {"cpu": "50m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
        "securityContext": {
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "source", "mountPath": "/app", "readOnly": True},
            {"name": f"{name}-tmp", "mountPath": "/tmp"},
        ],
    }
    pod_spec = {
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": APP_UID,
            "runAsGroup": APP_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "source", "configMap": {"name": f"{name}-source"}},
            # podman 4.3 makes an emptyDir a volume named as it is, shared by every pod
            # naming one alike: a name per app keeps one app's /tmp from another's
            {"name": f"{name}-tmp", "emptyDir": {"sizeLimit": "16Mi"}},
        ],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-source", "labels": labels},
            "data": {"app.py": HELLO.read_text()},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": "http"}]},
        },
    ]


def test_a_hardened_deployment_played_by_podman_answers_200_from_the_host(
    podman: Podman,
) -> None:
    image = podman.ensure_image()
    name = f"hello-{uuid.uuid4().hex[:8]}"
    port = free_port()
    with podman.played(hello_objects(name, image.ref, port)) as played:
        assert len(played.pods) == 1, played
        pod = played.pods[0]
        try:
            status, body = wait_http(podman.pod_ip(pod), port, "/")
            published = wait_http("127.0.0.1", port, "/healthz")
        except OSError as error:
            pytest.fail(f"the pod never answered ({error}); its output:\n{podman.logs(pod)}")
        assert status == 200
        assert json.loads(body)["app"] == "hello"
        assert published == (200, b'{"ok": true}')
        inside = json.loads(podman.exec(f"{pod}-app", "/usr/bin/python3", "-c", PROBE))
        assert inside == {
            "uid": APP_UID,
            "gid": APP_UID,
            "CapEff": "0000000000000000",
            "CapBnd": "0000000000000000",
            "NoNewPrivs": "1",
            "Seccomp": "2",
            "root": "read-only",
            "app": "read-only",
            "tmp": "writable",
            "token": False,
        }
