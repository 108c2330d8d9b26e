"""Certificates the data plane serves, chosen by SNI.

The control plane (``platform/tls``: ACME-issued, or the operator's ``APPDECK_TLS_CERT`` /
``APPDECK_TLS_KEY``) puts each certificate here under a stable name; the HAProxy driver hands it
to HAProxy through its runtime API without a reload. A certificate covers exact hostnames and
``*.<domain>`` wildcards; :meth:`Certificates.for_host` picks the exact one first.

Every certificate here is already checked by its writer (key matches the chain, not expired).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from appdeck.ingress.watched import Watched

NAME: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
"""A certificate's name: what the driver files it under (``<name>.pem``)."""


@dataclass(frozen=True, slots=True)
class Certificate:
    hostnames: tuple[str, ...]
    """The names it covers (its SANs), lower case; ``*.apps.example.com`` for a wildcard."""
    chain_pem: bytes
    """Leaf first, then intermediates."""
    key_pem: bytes
    not_after: float
    """Epoch seconds."""


class Certificates(Watched[Certificate]):
    """Name → certificate."""

    def put(self, name: str, certificate: Certificate) -> None:
        if not NAME.fullmatch(name):
            raise ValueError(f"invalid certificate name {name!r}")
        self._put(name, certificate)

    def drop(self, name: str) -> None:
        self._drop(name)

    def for_host(self, host: str) -> tuple[str, Certificate] | None:
        """The certificate served for ``host`` (SNI): an exact name first, then a wildcard."""
        host = host.lower().rstrip(".")
        items = self.items()
        for name, cert in items.items():
            if host in cert.hostnames:
                return name, cert
        parent = host.split(".", 1)[1] if "." in host else ""
        for name, cert in items.items():
            if parent and f"*.{parent}" in cert.hostnames:
                return name, cert
        return None
