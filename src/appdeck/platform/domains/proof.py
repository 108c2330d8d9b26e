"""The ports a custom domain's proof goes through.

:class:`TxtResolver` looks up the TXT record ``_appdeck-challenge.<domain>``; the default,
:class:`DnsTxtResolver`, asks the system's resolvers (or ``APPDECK_DNS_RESOLVER``'s
``host:port``, for tests) through dnspython, every lookup bounded in time. :class:`TlsStatus`
is what the ACME part tells about a hostname's certificate (``get_app_url``'s ``tls``).

dnspython is imported at the first lookup, not with the server (~0.05 s of every start's CPU).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    import dns.asyncresolver

from appdeck.ingress.certs import Certificates

CHALLENGE_LABEL: Final = "_appdeck-challenge"
LOOKUP_SECONDS: Final = 3.0
"""How long one TXT lookup may take, retries included."""
MAX_VALUES: Final = 3
MAX_VALUE_SHOWN: Final = 60


def challenge_name(host: str) -> str:
    """Where the TXT proof of ``host`` lives."""
    return f"{CHALLENGE_LABEL}.{host}"


class LookupFailed(Exception):
    """The lookup itself failed (no answer in time, no resolver): ``str()`` says so, for
    people."""


class TxtResolver(Protocol):
    async def txt(self, name: str) -> list[str]:
        """The TXT values at ``name`` (each record's strings joined); [] when there is none.
        Raises :class:`LookupFailed` when DNS could not say."""
        ...


class TlsStatus(Protocol):
    """The certificate state of a hostname, as the ACME part knows it."""

    def status_of(self, host: str) -> dict[str, Any] | None:
        """``None`` when no certificate is known; else a small JSON object (the ACME part's
        shape: ``live`` true once a certificate is served, ``port`` of HTTPS when not 443)."""
        ...


class NoTls:
    """No certificates anywhere (until the ACME part implements :class:`TlsStatus`)."""

    def status_of(self, host: str) -> dict[str, Any] | None:
        return None


@dataclass(frozen=True, slots=True)
class DnsTxtResolver:
    """TXT lookups through dnspython; ``server`` ``host:port`` overrides the system's."""

    server: str | None = None
    timeout: float = LOOKUP_SECONDS

    def _resolver(self) -> dns.asyncresolver.Resolver:
        import dns.asyncresolver
        import dns.resolver

        if self.server is None:
            try:
                resolver = dns.asyncresolver.Resolver()
            except dns.resolver.NoResolverConfiguration:
                raise LookupFailed("no DNS resolver is configured on the server") from None
        else:
            host, _, port = self.server.rpartition(":")
            resolver = dns.asyncresolver.Resolver(configure=False)
            resolver.nameservers = [host.strip("[]")]
            resolver.port = int(port)
        resolver.lifetime = self.timeout
        resolver.timeout = self.timeout
        return resolver

    async def txt(self, name: str) -> list[str]:
        import dns.exception
        import dns.rdatatype
        import dns.resolver

        try:
            answer = await self._resolver().resolve(name, dns.rdatatype.TXT, search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return []
        except dns.exception.Timeout:
            raise LookupFailed(f"DNS gave no answer within {self.timeout:g} s") from None
        except dns.exception.DNSException:
            raise LookupFailed("DNS could not answer (no nameserver gave a usable reply)") from None
        values = []
        for record in answer:
            strings = getattr(record, "strings", ())
            values.append(b"".join(strings).decode("utf-8", "replace"))
        return values


def mismatch(name: str, found: list[str]) -> str:
    """Why ``found`` at ``name`` proves nothing, bounded: what was there, a few values cut."""
    if not found:
        return f"no TXT record at {name}"
    shown = []
    for value in found[:MAX_VALUES]:
        clean = "".join(c if c.isprintable() else "?" for c in value[:MAX_VALUE_SHOWN])
        shown.append(repr(clean + ("…" if len(value) > MAX_VALUE_SHOWN else "")))
    more = f" and {len(found) - MAX_VALUES} more" if len(found) > MAX_VALUES else ""
    return f"the TXT record at {name} has the wrong value: found {', '.join(shown)}{more}"


class ServedCertificates:
    """:class:`TlsStatus` from the certificates the data plane serves right now (what TLS
    loaded into it: ACME-issued or the operator's): a hostname is ``live`` while a certificate
    covering it is served and not expired. Only a data plane with an HTTPS listener makes one
    (HAProxy with ``APPDECK_HTTPS_PORT``); ``https_port`` other than 443 goes into the URL.
    ``orders`` (the TLS service's states) adds what the ACME order is doing: its state
    (pending, issuing, issued, renewing, failed, expired), error, expiry and next try."""

    def __init__(
        self,
        certificates: Certificates,
        https_port: int,
        clock: Callable[[], float] = time.time,
        orders: TlsStatus | None = None,
    ) -> None:
        self._certificates = certificates
        self._port = https_port
        self._clock = clock
        self._orders = orders

    def status_of(self, host: str) -> dict[str, Any] | None:
        if len(host) > 300:
            return None
        served = self._served(host)
        order = self._orders.status_of(host) if self._orders is not None else None
        if order is None:
            return served
        status = dict(order)
        status["live"] = served is not None and served["live"] is True
        if status["live"] and served is not None and "port" in served:
            status["port"] = served["port"]
        return status

    def _served(self, host: str) -> dict[str, Any] | None:
        found = self._certificates.for_host(host)
        if found is None:
            return None
        _, certificate = found
        not_after = datetime.fromtimestamp(certificate.not_after, UTC).isoformat()
        if certificate.not_after <= self._clock():
            return {"live": False, "state": "expired", "not_after": not_after}
        status: dict[str, Any] = {"live": True, "state": "issued", "not_after": not_after}
        if self._port != 443:
            status["port"] = self._port
        return status
