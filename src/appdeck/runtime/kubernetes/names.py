"""Kubernetes names and label values for AppDeck's objects, and the checks on every value a
client controls before it reaches a manifest.

Names are made from tenant, app and release, deterministically: the same release always gets
the same names, so a restarted control plane finds its objects again. Every name is a DNS-1035
label (``[a-z]([-a-z0-9]*[a-z0-9])?``, at most 63 characters): the strictest rule any of our
kinds has (a Service's), so one rule fits all of them. A name that would be longer is cut and
ends with ``-`` and 10 hex digits of the SHA-256 of the whole name, so two long names that
share a prefix still differ::

    object_name("app", "hello--acme", "r3")   == "app-hello--acme-r3"
    object_name("app", "<60 chars>", "r3")    == "app-<41 chars>-3f9c0a12de"

A value that is not valid where it goes (an app name with a capital, an env name with ``=``, a
health path with a newline, a tenant with ``--``) raises :class:`InvalidArgument`: it is never
quoted into a manifest, because no quoting makes an invalid env name valid.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from appdeck.common.errors import InvalidArgument
from appdeck.model import hostnames
from appdeck.model.release import Release
from appdeck.runtime.kubernetes.limits import ClusterLimits

MAX_NAME: Final = 63
"""A DNS label, a label value, a Service name."""
_HASH: Final = 10
_DNS_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_APP_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
"""The platform's app-name rule (``platform.apps.APP_NAME``), length checked apart."""
_LABEL_VALUE: Final = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
"""An env var name a shell can read, and a valid Secret key (``[-._a-zA-Z0-9]+``)."""
RESERVED_ENV: Final = frozenset({"PORT", "HOST", "DATABASE_URL"})
"""The platform's in every instance (``specs.RESERVED_ENV``: the spec refuses them too). The
pod's other own names (``HOME``, ``PATH``, ``PYTHONUNBUFFERED``) win over the Secret's as
``env`` wins over ``envFrom``, as the local driver's ``PATH`` wins over the app's."""
_HTTP_PATH: Final = re.compile(r"/[!-~]{0,511}")
"""Printable ASCII, no space: the path goes into an HTTP request line (``specs._HEALTH_PATH``)."""
_DOMAIN: Final = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
)


def object_name(*parts: str) -> str:
    """``parts`` joined by ``-`` as a DNS-1035 label of at most 63 characters (cut with a hash
    suffix when longer). The first part must start with a letter."""
    name = "-".join(parts)
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH]
        name = f"{name[: MAX_NAME - _HASH - 1].rstrip('-')}-{digest}"
    if not _DNS_LABEL.fullmatch(name):
        raise InvalidArgument(f"{name!r} is not a valid Kubernetes name (DNS-1035 label)")
    return name


def label_value(value: str) -> str:
    """``value`` if it is a valid label value (at most 63 characters), else InvalidArgument."""
    if len(value) > MAX_NAME or (value and not _LABEL_VALUE.fullmatch(value)):
        raise InvalidArgument(f"{value[:80]!r} is not a valid Kubernetes label value")
    return value


def checked_tenant(tenant: str) -> str:
    """``tenant`` if it is routable (DNS label characters, no ``--``, at most 60)."""
    if not hostnames.routable_tenant(tenant):
        raise InvalidArgument(f"tenant id {tenant[:80]!r} cannot carry apps on Kubernetes")
    return tenant


def checked_app(app_name: str, tenant: str) -> str:
    """The route label ``<app>--<tenant>`` of a valid app of a routable tenant."""
    checked_tenant(tenant)
    if not _APP_NAME.fullmatch(app_name) or len(app_name) > hostnames.max_app_name_length(tenant):
        raise InvalidArgument(f"app name {app_name[:80]!r} is not valid for tenant {tenant!r}")
    return hostnames.route_label(app_name, tenant)


def checked_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` if every name is a valid, unreserved env var name and every value is UTF-8
    without a NUL."""
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise InvalidArgument(f"env name {name[:80]!r} is not a valid env var name")
        if name in RESERVED_ENV:
            raise InvalidArgument(f"env name {name} is set by the platform")
        if "\x00" in value:
            raise InvalidArgument(f"env {name} holds a NUL character")
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate: JSON's "\ud800" decodes to one
            raise InvalidArgument(f"env {name} is not valid UTF-8") from None
    return env


def checked_path(path: str) -> str:
    """An HTTP path for a probe: ``/`` then printable ASCII without spaces, at most 512."""
    if not _HTTP_PATH.fullmatch(path):
        raise InvalidArgument(f"health check path {path[:80]!r} is not a printable HTTP path")
    return path


def checked_domain(domain: str) -> str:
    """A lower-case DNS name for app hostnames (``apps.example.com``)."""
    if len(domain) > 253 - MAX_NAME - 1 or not _DOMAIN.fullmatch(domain):
        raise InvalidArgument(f"apps domain {domain[:80]!r} is not a DNS name")
    return domain


def namespace(tenant: str, limits: ClusterLimits) -> str:
    """Where the tenant's apps live: ``<namespace>-t-<tenant>`` (``tenant`` mode; the ``t``
    keeps a tenant called ``system`` out of ``appdeck-system``) or the one shared namespace."""
    if limits.namespace_mode == "shared":
        return limits.namespace
    return object_name(limits.namespace, "t", checked_tenant(tenant))


def release_name(release: Release, tenant: str) -> str:
    """The name of the release's Deployment and Service."""
    return object_name("app", route_label(release, tenant), f"r{release.number}")


def app_name(app: str, tenant: str) -> str:
    """The name of the app's NetworkPolicy and HTTPRoute."""
    return object_name("app", checked_app(app, tenant))


def app_selector(release: Release, tenant: str) -> dict[str, str]:
    """The labels every pod of every release of the app carries (app id: renames keep it)."""
    return {"appdeck.dev/tenant": tenant, "appdeck.dev/app-id": str(release.app_id)}


def release_selector(release: Release, tenant: str) -> dict[str, str]:
    """The labels of exactly this release's pods (its Deployment's selector)."""
    return {"appdeck.dev/tenant": tenant, "appdeck.dev/release": release.release_id}


def labels(release: Release, tenant: str) -> dict[str, str]:
    """Every object of the release carries these; adoption after a restart lists by them."""
    values = {
        "app.kubernetes.io/name": release.app_name,
        "app.kubernetes.io/instance": route_label(release, tenant),
        "app.kubernetes.io/version": f"r{release.number}",
        "app.kubernetes.io/component": "app",
        "app.kubernetes.io/managed-by": "appdeck",
        "appdeck.dev/app": release.app_name,
        **app_selector(release, tenant),
        **release_selector(release, tenant),
    }
    return {key: label_value(value) for key, value in values.items()}


def secret_name(release: Release, tenant: str, purpose: str) -> str:
    """The name of the release's ``env`` or ``source`` Secret."""
    return object_name("app", route_label(release, tenant), f"r{release.number}", purpose)


def route_label(release: Release, tenant: str) -> str:
    """The checked route label of the release's app (its ``route`` must agree)."""
    label = checked_app(release.app_name, tenant)
    if release.route and release.route != label:
        raise InvalidArgument(f"release {release.release_id} is routed as {release.route!r}")
    if release.number < 1 or release.app_id < 1:
        raise InvalidArgument(f"release {release.release_id} has no valid number")
    return label


def app_labels(release: Release, tenant: str) -> dict[str, str]:
    """The labels of the app's own objects (no release in them)."""
    keep = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by")
    full = labels(release, tenant)
    return {
        **{k: full[k] for k in keep},
        "appdeck.dev/app": full["appdeck.dev/app"],
        **app_selector(release, tenant),
    }
