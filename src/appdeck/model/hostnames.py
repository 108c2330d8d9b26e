"""The one rule for an app's hostname: ``<app>--<tenant>.localhost``.

App names are unique only within a tenant, so a hostname made of the name alone would let one
tenant take over another's traffic. The hostname carries the tenant instead, and a hostname
belongs to exactly one app platform-wide (DESIGN.md §5, "The trust boundary"):

    route_label("hello", "acme")  == "hello--acme"
    hostname("hello", "acme")     == "hello--acme.localhost"
    parse_label("my--app--acme")  == ("my--app", "acme")    # split on the *last* "--"

The label is the app's **route key**: the ingress route table is keyed by it, the deploy
engine routes and counts by it, and nobody else builds a hostname.

Why the parse is unambiguous: an app name starts and ends with a letter or digit, and a
routable tenant id has no ``--`` and neither starts nor ends with ``-``. So the last ``--`` of
a label is the separator, and two different (app, tenant) pairs never share a label. Tenant ids
with ``--`` or a trailing ``-`` are refused when created (``appdeck tenant create``); one made
before that rule cannot register apps or get routes (:func:`unroutable_reason` says why).

A label is a DNS label: at most 63 characters. An app name may be as long as
``63 - 2 - len(tenant)`` (and at most 40, the app-name rule): :func:`max_app_name_length`.
"""

from __future__ import annotations

import re
from typing import Final

SEPARATOR: Final = "--"
MAX_LABEL: Final = 63
"""The longest DNS label (RFC 1035)."""
BASE_DOMAIN: Final = "localhost"
"""Resolves to loopback in browsers and curl without any DNS set-up."""
PATTERN: Final = f"<app>{SEPARATOR}<tenant>.{BASE_DOMAIN}"
"""How to describe the scheme to people (errors, help texts)."""

_TENANT: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
_LABEL: Final = re.compile(r"[a-z0-9-]{1,63}")


def routable_tenant(tenant: str) -> bool:
    """Whether apps of ``tenant`` can have a hostname: no ``--``, no leading or trailing
    ``-`` (the tenant-id slug rule allows both; new tenant ids must pass this too)."""
    return (
        len(tenant) <= MAX_LABEL - len(SEPARATOR) - 1
        and _TENANT.fullmatch(tenant) is not None
        and SEPARATOR not in tenant
    )


def max_app_name_length(tenant: str) -> int:
    """The longest app name whose label fits in a DNS label, for this tenant (may be 0)."""
    return max(0, MAX_LABEL - len(SEPARATOR) - len(tenant))


def route_label(app_name: str, tenant: str) -> str:
    """The DNS label (and route key) of the app ``app_name`` of ``tenant``."""
    return f"{app_name}{SEPARATOR}{tenant}"


def hostname(app_name: str, tenant: str, domain: str = BASE_DOMAIN) -> str:
    """The host the app answers at under ``domain`` (``localhost`` or an extra ingress domain)."""
    return f"{route_label(app_name, tenant)}.{domain}"


def url(app_name: str, tenant: str, port: int, domain: str = BASE_DOMAIN) -> str:
    """The app's URL through the ingress router listening on ``port``."""
    return f"http://{hostname(app_name, tenant, domain)}:{port}/"


def parse_label(label: str) -> tuple[str, str] | None:
    """``(app, tenant)`` for a label this module made, else ``None``."""
    if not _LABEL.fullmatch(label):
        return None
    app, separator, tenant = label.rpartition(SEPARATOR)
    if not separator or not app or not routable_tenant(tenant):
        return None
    if app.startswith("-") or app.endswith("-"):
        return None
    return app, tenant


def unroutable_reason(app_name: str, tenant: str) -> str | None:
    """Why the app cannot have a hostname (``None`` when it can): the message for an
    ``invalid_argument`` at register and rename."""
    if not routable_tenant(tenant):
        return (
            f"tenant id {tenant!r} cannot carry app hostnames ({PATTERN}): it contains "
            f"{SEPARATOR!r}, starts or ends with '-', or is too long; apps need a tenant whose "
            "id has none of these"
        )
    limit = max_app_name_length(tenant)
    if len(app_name) > limit:
        return (
            f"app name {app_name!r} is too long for tenant {tenant!r}: its hostname "
            f"{route_label(app_name, tenant)}.{BASE_DOMAIN} must have a first label of at most "
            f"{MAX_LABEL} characters, so app names in this tenant have at most {limit}"
        )
    return None


__all__ = [
    "BASE_DOMAIN",
    "MAX_LABEL",
    "PATTERN",
    "SEPARATOR",
    "hostname",
    "max_app_name_length",
    "parse_label",
    "routable_tenant",
    "route_label",
    "unroutable_reason",
    "url",
]
