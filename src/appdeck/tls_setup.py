"""Automatic TLS as ``appdeck serve`` assembles it from its settings (docs/tls.md); the
composition root, :mod:`appdeck.app`, starts it once the replicas' liveness is known."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol
from urllib.parse import urlsplit

from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.ingress.certs import Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.platform.crypto import Sealer
from appdeck.platform.domains import DomainService
from appdeck.platform.tls import PlatformNames, TlsConfig, TlsService
from appdeck.platform.tls.service import LiveReplicas
from appdeck.platform.tls.states import TlsStates
from appdeck.settings import Settings


class DataPlane(Protocol):
    """What TLS writes into either data plane: certificates by SNI, HTTP-01 answers."""

    @property
    def certificates(self) -> Certificates: ...

    @property
    def challenges(self) -> Challenges: ...


def tls_of(
    settings: Settings,
    engine: AsyncEngine,
    ingress: DataPlane,
    replica: str,
    live_replicas: LiveReplicas | None,
    domains: DomainService | None = None,
    *,
    states: TlsStates | None = None,
    served: Callable[[], Awaitable[None]] | None = None,
) -> TlsService | None:
    """The TLS service when ACME or the operator's files are set; None otherwise."""
    s = settings
    if not (s.acme_directory or s.tls_cert or s.tls_key):
        return None
    names = PlatformNames(
        engine,
        apps_domain=getattr(s, "apps_domain", None),  # APPDECK_APPS_DOMAIN: the domains part
        public_host=urlsplit(s.public_url).hostname if s.public_url else None,
        domains=domains,  # custom domains: a certificate issued for one proves it
    )
    config = TlsConfig(
        directory=s.acme_directory,
        email=s.acme_email,
        ca_bundle=s.acme_ca_bundle,
        cert_file=s.tls_cert,
        key_file=s.tls_key,
        max_names_per_app=s.acme_names_per_app,
        orders_per_tenant_hour=s.acme_orders_per_tenant_hour,
        max_waiting=s.acme_max_waiting,
        backoff_base=s.acme_retry_seconds,
    )
    return TlsService(
        engine,
        Sealer.from_settings(s.secret_key, s.data_dir),
        ingress.certificates,
        ingress.challenges,
        config,
        names=names,
        replica=replica,
        live_replicas=live_replicas,
        domain_verified=_proved_by_acme(domains) if domains is not None else None,
        states=states,  # get_app_url reads it synchronously
        served=served,  # HAProxy: challenges acknowledged once its maps hold them
    )


def _proved_by_acme(domains: DomainService) -> Callable[[str, str], Awaitable[None]]:
    """A certificate issued for a custom domain verifies its claim (``method="acme"``)."""

    async def proved(domain: str, method: str) -> None:
        await domains.mark_verified(domain, "acme")

    return proved
