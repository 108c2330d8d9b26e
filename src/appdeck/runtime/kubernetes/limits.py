"""What the operator decides for every app on the cluster: the base image, where AppDeck and
the gateway run, the namespace mode, and the ceilings a spec's resources are clamped to."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import urlsplit

NamespaceMode = Literal["tenant", "shared"]
"""``tenant``: a namespace per tenant (``<namespace>-t-<tenant>``); ``shared``: every app in
``namespace``, told apart by labels (docs/kubernetes.md says why ``tenant`` is the default)."""

PRIVATE_V4: Final = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
"""Never reachable from an app with ``outbound``: private, shared, loopback, link-local
(the cloud metadata address 169.254.169.254), benchmark, multicast and reserved ranges."""
PRIVATE_V6: Final = (
    "::1/128",
    "::ffff:0:0/96",
    "64:ff9b::/96",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
)
"""The same for IPv6, with the IPv4-mapped and NAT64 prefixes (they reach IPv4 ranges)."""
_IMAGE: Final = re.compile(r"[a-z0-9][a-z0-9._/:@-]{0,254}")
_NAME: Final = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_KEY: Final = re.compile(
    r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_LABEL_VALUE: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


@dataclass(frozen=True, slots=True)
class ClusterLimits:
    """The operator's settings for the Kubernetes driver (one value for the whole platform)."""

    image: str
    """The base image every release runs in: the Debian release of AppDeck's hosts (the
    workspace's ``.venv`` was built there) with Python 3, Node, sh, curl and tar."""
    source_url: str
    """AppDeck as the cluster's pods reach it (``http://appdeck.appdeck-system.svc:8080``)."""
    namespace_mode: NamespaceMode = "tenant"
    namespace: str = "appdeck"
    """The shared namespace, or the prefix of the tenants' ones (``appdeck-t-<tenant>``)."""
    gateway_name: str = "appdeck"
    gateway_namespace: str = "appdeck-gateway"
    gateway_pod_labels: tuple[tuple[str, str], ...] = (
        ("gateway.networking.k8s.io/gateway-name", "appdeck"),
    )
    """The labels of the gateway's proxy pods (the only ingress an app takes)."""
    gateway_pods_namespace: str | None = None
    """Where those proxy pods run, when not beside the Gateway (Envoy Gateway runs every
    Gateway's proxies in ``envoy-gateway-system``); None: ``gateway_namespace``."""
    appdeck_namespace: str = "appdeck-system"
    appdeck_pod_labels: tuple[tuple[str, str], ...] = (("app.kubernetes.io/name", "appdeck"),)
    dns_namespace: str = "kube-system"
    dns_pod_labels: tuple[tuple[str, str], ...] = (("k8s-app", "kube-dns"),)
    domain: str = "localhost"
    """Apps answer at ``<app>--<tenant>.<domain>``."""
    max_cpus: float = 2.0
    max_memory_mb: int = 2048
    max_disk_mb: int = 4096
    """Ceiling of a pod's ephemeral storage (its source, ``/tmp`` and logs)."""
    tmp_mb: int = 256
    """``/tmp`` of each pod (an ``emptyDir``; at most the pod's disk)."""
    max_source_mb: int = 256
    """The largest workspace tar the init container fetches (its volume holds twice that while it
    unpacks)."""
    private_v4: tuple[str, ...] = PRIVATE_V4
    private_v6: tuple[str, ...] = PRIVATE_V6
    """Add the cluster's pod and service ranges when they are public addresses."""
    appdeck_pod_port: int | None = None
    """The port AppDeck's pods listen on, when its Service maps ``source_url``'s port to
    another (a NetworkPolicy sees the pod's port, after the Service's translation)."""
    source_port: int = field(init=False)
    """The port app pods may reach AppDeck's pods on: ``appdeck_pod_port`` or the URL's."""

    @property
    def gateway_proxies_namespace(self) -> str:
        """The namespace the apps' NetworkPolicy admits the gateway's proxy pods from."""
        return self.gateway_pods_namespace or self.gateway_namespace

    def __post_init__(self) -> None:
        if not _IMAGE.fullmatch(self.image):
            raise ValueError(f"image {self.image!r} is not an image reference")
        url = urlsplit(self.source_url)
        if (
            url.scheme not in ("http", "https")
            or not url.hostname
            or url.query
            or url.fragment
            or not self.source_url.isascii()
            or not self.source_url.isprintable()
            or " " in self.source_url
            or self.source_url.endswith("/")
        ):
            raise ValueError(f"source_url {self.source_url!r} is not an http(s) base URL")
        for name in (
            self.namespace,
            self.gateway_name,
            self.gateway_namespace,
            self.gateway_proxies_namespace,
            self.appdeck_namespace,
            self.dns_namespace,
        ):
            if not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a Kubernetes name")
        if self.namespace_mode == "tenant" and any(
            name.startswith(f"{self.namespace}-t-")
            for name in (
                self.gateway_namespace,
                self.gateway_proxies_namespace,
                self.appdeck_namespace,
                self.dns_namespace,
            )
        ):
            raise ValueError(
                f"tenants' namespaces ({self.namespace}-t-*) must not hold the platform's"
            )
        for key, value in (
            *self.gateway_pod_labels,
            *self.appdeck_pod_labels,
            *self.dns_pod_labels,
        ):
            if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
                raise ValueError(f"{key}={value} is not a Kubernetes label")
        for blocks, version in ((self.private_v4, 4), (self.private_v6, 6)):
            for block in blocks:
                if ipaddress.ip_network(block).version != version:
                    raise ValueError(f"{block} is not an IPv{version} range")
        if min(self.max_cpus, self.max_memory_mb, self.max_disk_mb, self.tmp_mb) <= 0:
            raise ValueError("the ceilings must be positive")
        if self.max_source_mb <= 0 or self.max_source_mb * 2 + self.tmp_mb > self.max_disk_mb:
            raise ValueError("max_disk_mb must hold /tmp and twice max_source_mb")
        if self.appdeck_pod_port is not None and not 1 <= self.appdeck_pod_port <= 65535:
            raise ValueError(f"appdeck_pod_port {self.appdeck_pod_port} is not a port")
        port = self.appdeck_pod_port or url.port or (443 if url.scheme == "https" else 80)
        object.__setattr__(self, "source_port", port)
