"""The Kubernetes objects of one release of an app (issue 25 §2): plain JSON-ready dicts, no
client, no API call. The Kubernetes driver applies what these functions return.

==================  ===========  ==================================================
object              one per      what it is for
==================  ===========  ==================================================
``Namespace``       tenant       ``tenant`` mode only; Pod Security ``restricted``
``Deployment``      release      ``instances`` pods of the base image
``Secret`` (env)    release      the release's env, ``immutable``; ``envFrom`` only
``Secret`` (source) release      the token the init container fetches the source with
``Service``         release      ClusterIP, port 80 → the container's ``http`` port
``NetworkPolicy``   app          ingress from the gateway; egress DNS, AppDeck, 443
``HTTPRoute``       app          the app's hostname; one weighted backend per release
==================  ===========  ==================================================

**Source**: an init container fetches the release's prepared workspace (its source, built by
AppDeck as the local driver builds it) as a tar from AppDeck
(``<source_url>/internal/releases/<release_id>/workspace.tar``, with a bearer token of the
release's own) into an ``emptyDir`` mounted read-only at ``/app`` in the app's container, at
most ``max_source_mb`` (a ConfigMap holds 1 MiB, stays in etcd for every release kept, and
cannot carry a ``.venv`` or ``node_modules``: docs/kubernetes.md).

**Ownership**: the API server gives uids, so nothing here renders ``ownerReferences``. The
driver applies the Deployment, reads its uid, then patches both Secrets with
:func:`owner_reference` (an immutable Secret's metadata can still change). Until then the
labels (``appdeck.dev/release``) tie them to the release, and adoption works from labels.

Every value a client controls goes through :mod:`.names` first and raises
:class:`~appdeck.common.errors.InvalidArgument` when it is not valid where it goes; env values
go only into the Secret, never into the pod spec.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Final

from appdeck.common.errors import InvalidArgument
from appdeck.common.types import JsonObject
from appdeck.model import hostnames
from appdeck.model.release import Release
from appdeck.runtime.kubernetes import names
from appdeck.runtime.kubernetes.limits import ClusterLimits
from appdeck.runtime.kubernetes.pods import pod_spec

SERVICE_PORT: Final = 80
MAX_SECRET_BYTES: Final = 1024 * 1024
"""What the API server takes in one Secret."""
MAX_WEIGHT: Final = 1_000_000
"""The Gateway API's largest ``backendRef`` weight."""


def namespace_object(tenant: str, limits: ClusterLimits) -> JsonObject:
    """The tenant's Namespace (``tenant`` mode), enforcing Pod Security ``restricted``."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": names.namespace(tenant, limits),
            "labels": {
                "app.kubernetes.io/managed-by": "appdeck",
                "appdeck.dev/tenant": names.label_value(tenant),
                "pod-security.kubernetes.io/enforce": "restricted",
            },
        },
    }


def secret(
    release: Release, tenant: str, limits: ClusterLimits, env: Mapping[str, str] | None = None
) -> JsonObject:
    """The release's env (``release.env`` unless given) as an immutable Secret."""
    values = names.checked_env(dict(release.env if env is None else env))
    data = {name: base64.b64encode(value.encode()).decode() for name, value in values.items()}
    if sum(len(k) + len(v) for k, v in data.items()) > MAX_SECRET_BYTES:
        raise InvalidArgument("the env is larger than a Kubernetes Secret holds (1 MiB)")
    return _secret(release, tenant, limits, "env", data)


def source_secret(release: Release, tenant: str, limits: ClusterLimits, token: str) -> JsonObject:
    """The token the init container fetches the release's source with (its own Secret: the
    app's container never sees it)."""
    if not token.isascii() or not token.isprintable() or not 16 <= len(token) <= 512:
        raise InvalidArgument("a source token is 16 to 512 printable ASCII characters")
    return _secret(
        release, tenant, limits, "source", {"token": base64.b64encode(token.encode()).decode()}
    )


def _secret(
    release: Release, tenant: str, limits: ClusterLimits, purpose: str, data: dict[str, str]
) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(names.secret_name(release, tenant, purpose), release, tenant, limits),
        "type": "Opaque",
        "immutable": True,
        "data": data,
    }


def owner_reference(owner: JsonObject, uid: str) -> JsonObject:
    """The ``ownerReferences`` entry that makes ``owner`` (an applied Deployment, with the
    ``uid`` the API server gave it) own a Secret: deleting the release deletes its env."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": uid,
        "blockOwnerDeletion": False,
    }


def service(release: Release, tenant: str, limits: ClusterLimits) -> JsonObject:
    """The release's ClusterIP Service: port 80 to the container's ``http`` port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(names.release_name(release, tenant), release, tenant, limits),
        "spec": {
            "type": "ClusterIP",
            "selector": names.release_selector(release, tenant),
            "ports": [
                {
                    "name": "http",
                    "protocol": "TCP",
                    "appProtocol": "http",
                    "port": SERVICE_PORT,
                    "targetPort": "http",
                }
            ],
        },
    }


def http_route(
    app: str, tenant: str, limits: ClusterLimits, backends: Sequence[tuple[Release, int]]
) -> JsonObject:
    """The app's HTTPRoute: its hostname, and one backend per release with its weight (the
    canary or blue/green share; the weights are kept as given, not normalised)."""
    label = names.checked_app(app, tenant)
    if not backends:
        raise InvalidArgument("a route needs at least one release")
    seen: set[str] = set()
    refs = []
    for release, weight in backends:
        if names.route_label(release, tenant) != label or release.release_id in seen:
            raise InvalidArgument(f"release {release.release_id} is not one backend of {label}")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= MAX_WEIGHT:
            raise InvalidArgument(f"weight {weight!r} is not an integer in 0..{MAX_WEIGHT}")
        seen.add(release.release_id)
        refs.append(
            {
                "group": "",
                "kind": "Service",
                "name": names.release_name(release, tenant),
                "port": SERVICE_PORT,
                "weight": weight,
            }
        )
    if not any(ref["weight"] for ref in refs):
        raise InvalidArgument("every weight is 0: the route would send nothing anywhere")
    newest = max((release for release, _ in backends), key=lambda r: r.number)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": names.app_name(app, tenant),
            "namespace": names.namespace(tenant, limits),
            "labels": names.app_labels(newest, tenant),
        },
        "spec": {
            "parentRefs": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": limits.gateway_name,
                    "namespace": limits.gateway_namespace,
                }
            ],
            "hostnames": [hostnames.hostname(app, tenant, names.checked_domain(limits.domain))],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": refs,
                }
            ],
        },
    }


def network_policy(release: Release, tenant: str, limits: ClusterLimits) -> JsonObject:
    """The app's NetworkPolicy, from its newest release: ingress only from the gateway's pods
    to the ``http`` port; egress to DNS, to AppDeck's source endpoint, and, when
    ``spec.outbound``, to public addresses on 443 (private ranges excepted)."""
    egress: list[JsonObject] = [
        {
            "to": [_peer(limits.dns_namespace, dict(limits.dns_pod_labels))],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {
            "to": [_peer(limits.appdeck_namespace, dict(limits.appdeck_pod_labels))],
            "ports": [{"protocol": "TCP", "port": limits.source_port}],
        },
    ]
    if release.spec.outbound:
        egress.append(
            {
                "to": [
                    {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(limits.private_v4)}},
                    {"ipBlock": {"cidr": "::/0", "except": list(limits.private_v6)}},
                ],
                "ports": [{"protocol": "TCP", "port": 443}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.app_name(release.app_name, tenant),
            "namespace": names.namespace(tenant, limits),
            "labels": names.app_labels(release, tenant),
        },
        "spec": {
            "podSelector": {"matchLabels": names.app_selector(release, tenant)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [
                        _peer(limits.gateway_proxies_namespace, dict(limits.gateway_pod_labels))
                    ],
                    "ports": [{"protocol": "TCP", "port": "http"}],
                }
            ],
            "egress": egress,
        },
    }


def _peer(namespace_name: str, pod_labels: dict[str, str]) -> JsonObject:
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace_name}},
        "podSelector": {"matchLabels": pod_labels},
    }


def deployment(release: Release, tenant: str, limits: ClusterLimits) -> JsonObject:
    """The release's Deployment: ``instances`` hardened pods of the base image."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(names.release_name(release, tenant), release, tenant, limits),
        "spec": {
            "replicas": release.spec.instances,
            "revisionHistoryLimit": 1,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": names.release_selector(release, tenant)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": names.labels(release, tenant)},
                "spec": pod_spec(release, tenant, limits),
            },
        },
    }


def render(
    release: Release,
    tenant: str,
    limits: ClusterLimits,
    *,
    source_token: str,
    env: Mapping[str, str] | None = None,
    backends: Sequence[tuple[Release, int]] | None = None,
) -> list[JsonObject]:
    """Every object of ``release``, in the order to apply them: the Namespace (``tenant``
    mode), the Secrets, the Deployment, the Service, the app's NetworkPolicy and HTTPRoute
    (``backends``: the route's releases and weights; this release alone at 100 unless given).
    """
    objects = [namespace_object(tenant, limits)] if limits.namespace_mode == "tenant" else []
    return [
        *objects,
        secret(release, tenant, limits, env),
        source_secret(release, tenant, limits, source_token),
        deployment(release, tenant, limits),
        service(release, tenant, limits),
        network_policy(release, tenant, limits),
        http_route(release.app_name, tenant, limits, backends or [(release, 100)]),
    ]


def _metadata(name: str, release: Release, tenant: str, limits: ClusterLimits) -> JsonObject:
    return {
        "name": name,
        "namespace": names.namespace(tenant, limits),
        "labels": names.labels(release, tenant),
    }


__all__ = [
    "SERVICE_PORT",
    "ClusterLimits",
    "deployment",
    "http_route",
    "namespace_object",
    "network_policy",
    "owner_reference",
    "render",
    "secret",
    "service",
    "source_secret",
]
