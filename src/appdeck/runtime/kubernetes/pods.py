"""The pod of a release: the base image running its source, hardened (Pod Security
``restricted`` and then some), its resources clamped to the operator's ceilings.

Two containers run in order: ``source`` (init) fetches the release's *prepared workspace*
from AppDeck (the tar of what the driver's ``prepare`` built at ``/app`` in its sandbox:
the source with its ``.venv`` or ``node_modules``; no build runs in the pod) into the
``source`` volume, then ``app`` runs the spec's command in it, read-only, as uid 65532, with
``/tmp`` its only writable place. The app gets its env from the release's Secret
(``envFrom``) and from the platform (``PORT``, ``HOST``, ``HOME``, ``PATH``), nothing else:
no service account token, no service links, no capabilities.
"""

from __future__ import annotations

import math
from typing import Final

from appdeck.common.errors import InvalidArgument
from appdeck.common.types import JsonObject
from appdeck.model.release import Release
from appdeck.runtime.kubernetes import names
from appdeck.runtime.kubernetes.limits import ClusterLimits

DEFAULT_PORT: Final = 8080
"""The container's port when the spec leaves ``port`` null (the app reads ``$PORT``)."""
RUN_AS: Final = 65532
"""The uid and gid of every container (the base image needs no user of that id)."""
APP_DIR: Final = "/app"
"""Where the workspace is, in the pod as in the local sandbox (so a ``.venv`` built there works
here, given the same Debian release in the base image)."""
PATH: Final = f"{APP_DIR}/.venv/bin:{APP_DIR}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"
"""The sandbox's ``PATH`` (``runtime.sandbox.SANDBOX_PATH``)."""
SOURCE_TOKEN_ENV: Final = "APPDECK_SOURCE_TOKEN"  # noqa: S105 - a name, not a token

_FETCH: Final = """set -eu
curl --fail --silent --show-error --max-time 300 --max-filesize "$2" --retry 20 \\
  --oauth2-bearer "$APPDECK_SOURCE_TOKEN" --output /app/.workspace.tar "$1"
tar --extract --file /app/.workspace.tar --directory /app --no-same-owner --no-same-permissions
rm -f /app/.workspace.tar
"""
"""The init container's script: the URL and the byte limit are its arguments (``$1``,
``$2``), never spliced into it. ``--retry``: a busy AppDeck answers 503 with ``Retry-After``
(``platform.workspace_tars.MAX_OPEN`` tars at once), and curl waits that long and asks again."""
_DEFAULT_RUN: Final = {
    "static": 'exec python3 -I -m http.server "$PORT" --bind 0.0.0.0',
    "python": "if [ -f app.py ]; then exec python3 app.py; else exec python3 main.py; fi",
    "node": "if [ -f server.js ]; then exec node server.js; else exec node index.js; fi",
}
"""The command of a spec without ``run_command``, as the local driver guesses it (without
the workspace to look in)."""
_HARDENED: Final = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod_spec(release: Release, tenant: str, limits: ClusterLimits) -> JsonObject:
    """The pod template's ``spec`` of the release."""
    env_secret = names.secret_name(release, tenant, "env")
    app: JsonObject = {
        "name": "app",
        "image": limits.image,
        "imagePullPolicy": "IfNotPresent",
        "command": run_argv(release),
        "workingDir": APP_DIR,
        "ports": [{"name": "http", "containerPort": port(release), "protocol": "TCP"}],
        "env": [
            {"name": "PORT", "value": str(port(release))},
            {"name": "HOST", "value": "0.0.0.0"},
            {"name": "HOME", "value": "/tmp"},  # noqa: S108 - the pod's private emptyDir
            {"name": "PATH", "value": PATH},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "envFrom": [{"secretRef": {"name": env_secret, "optional": False}}],
        "resources": resources(release, limits),
        "readinessProbe": {
            "httpGet": {
                "path": names.checked_path(release.spec.health_check.path),
                "port": "http",
                "scheme": "HTTP",
            },
            "timeoutSeconds": probe_timeout(release),
            "periodSeconds": 5,
            "failureThreshold": 3,
            "successThreshold": 1,
        },
        # Alive = accepting connections: a slow handler makes the pod unready, never killed.
        "startupProbe": {
            "tcpSocket": {"port": "http"},
            "periodSeconds": 2,
            "failureThreshold": 60,
            "timeoutSeconds": probe_timeout(release),
        },
        "livenessProbe": {
            "tcpSocket": {"port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 6,
            "timeoutSeconds": probe_timeout(release),
        },
        "securityContext": dict(_HARDENED),
        "volumeMounts": [
            {"name": "source", "mountPath": APP_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [_source_container(release, tenant, limits)],
        "containers": [app],
        "volumes": [
            {"name": "source", "emptyDir": {"sizeLimit": f"{2 * limits.max_source_mb}Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": f"{tmp_mb(release, limits)}Mi"}},
        ],
    }


def _source_container(release: Release, tenant: str, limits: ClusterLimits) -> JsonObject:
    token = {"name": names.secret_name(release, tenant, "source"), "key": "token"}
    return {
        "name": "source",
        "image": limits.image,
        "imagePullPolicy": "IfNotPresent",
        "command": fetch_argv(release, limits),
        "env": [
            {"name": SOURCE_TOKEN_ENV, "valueFrom": {"secretKeyRef": token}},
            {"name": "HOME", "value": "/tmp"},  # noqa: S108
        ],
        "resources": resources(release, limits),
        "securityContext": dict(_HARDENED),
        "volumeMounts": [
            {"name": "source", "mountPath": APP_DIR},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108
        ],
    }


def port(release: Release) -> int:
    """The container's port: the spec's, or :data:`DEFAULT_PORT`."""
    return release.spec.port or DEFAULT_PORT


def resources(release: Release, limits: ClusterLimits) -> JsonObject:
    """The spec's CPUs, memory and disk within the operator's ceilings; requests = limits
    (Guaranteed QoS: an app gets what it was promised, and is evicted last)."""
    spec = release.spec.resources
    amounts = {
        "cpu": f"{max(1, round(min(spec.cpus, limits.max_cpus) * 1000))}m",
        "memory": f"{min(spec.memory_mb, limits.max_memory_mb)}Mi",
        "ephemeral-storage": f"{min(spec.disk_mb, limits.max_disk_mb)}Mi",
    }
    return {"requests": dict(amounts), "limits": amounts}


def tmp_mb(release: Release, limits: ClusterLimits) -> int:
    """``/tmp``'s size: the operator's, within the pod's disk."""
    return max(1, min(limits.tmp_mb, release.spec.resources.disk_mb, limits.max_disk_mb))


def probe_timeout(release: Release) -> int:
    """The health check's timeout in whole seconds (at least 1), as probes take it."""
    return max(1, math.ceil(release.spec.health_check.timeout_s))


def run_argv(release: Release) -> list[str]:
    """The app's command: the spec's run command through ``sh -c`` (the app's own code: it
    runs confined whatever it says), or the runtime's default."""
    command = release.spec.run_command
    if command:
        if "\x00" in command or command.encode(errors="replace").decode() != command:
            raise InvalidArgument("run_command holds a NUL character or is not valid UTF-8")
        return ["/bin/sh", "-c", command]
    return ["/bin/sh", "-c", _DEFAULT_RUN.get(release.spec.runtime, _DEFAULT_RUN["python"])]


def fetch_argv(release: Release, limits: ClusterLimits) -> list[str]:
    """The init container's command: fetch and unpack the workspace (``$0`` names the
    script)."""
    url = f"{limits.source_url}/internal/releases/{release.release_id}/workspace.tar"
    return ["/bin/sh", "-c", _FETCH, "appdeck-fetch", url, str(limits.max_source_mb * 1024**2)]
