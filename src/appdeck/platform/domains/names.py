"""Which hostnames an app's spec may list in ``domains``.

A custom domain is a public DNS name (:func:`appdeck.ingress.hosts.normalize`: lower case, two
labels or more, a letter TLD, so never an IP address) that is none of the platform's own:
``localhost`` and names under it always answer locally, names under the apps domain are the
platform's to hand out (``<app>--<tenant>.<apps domain>``, and a tenant claiming
``x.<apps domain>`` could shadow another's app), and the control plane's public host would hand
the sign-in page's traffic to an app.
"""

from __future__ import annotations

from collections.abc import Iterable

from appdeck.common.errors import InvalidArgument
from appdeck.ingress.hosts import normalize

MAX_SHOWN = 80
"""How much of a refused name an error repeats."""


def _shown(name: object) -> str:
    text = str(name)
    printable = "".join(c if c.isprintable() else "?" for c in text[:MAX_SHOWN])
    return repr(printable + ("…" if len(text) > MAX_SHOWN else ""))


def _under(host: str, domain: str) -> bool:
    return host == domain or host.endswith("." + domain)


def refusal(name: str, *, apps_domain: str | None, reserved: Iterable[str] = ()) -> str | None:
    """Why ``name`` cannot be a custom domain (None when it can)."""
    host = normalize(name) if name.isascii() and name.strip() == name else None
    if host is None or ":" in name:
        return "not a public DNS name"
    if _under(host, "localhost"):
        return "not a public DNS name (localhost is this machine)"
    if apps_domain and _under(host, apps_domain):
        return f"under the platform's apps domain {apps_domain}"
    if host in reserved:
        return "the platform's own hostname"
    return None


def check(
    names: Iterable[str], *, apps_domain: str | None, reserved: Iterable[str] = ()
) -> list[str]:
    """``names`` normalized (lower case, no trailing dot), in order and without repeats;
    :class:`InvalidArgument` names the first one refused and why."""
    kept: list[str] = []
    taken = frozenset(reserved)
    for index, name in enumerate(names):
        reason = refusal(name, apps_domain=apps_domain, reserved=taken)
        if reason is not None:
            raise InvalidArgument(
                f"invalid spec at domains/{index}: {_shown(name)} is {reason}",
                field=f"spec/domains/{index}",
                hint="list public hostnames you control, such as shop.example.com",
            )
        host = normalize(name)
        assert host is not None
        if host not in kept:
            kept.append(host)
    return kept
