"""Which names get a certificate, and what each certificate is called.

Three kinds, each one certificate per hostname (an order fails or succeeds alone, and one
tenant's broken DNS never holds another's certificate back):

- ``app``: a deployed app's public hostname ``<app>--<tenant>.<APPDECK_APPS_DOMAIN>`` (an app
  with a live release; a wildcard for the whole apps domain is the operator's, through the
  DNS-01 hook in ``docs/tls.md``);
- ``domain``: a custom domain its app claimed (the domains service says which: the
  :class:`ClaimedDomains` port); a certificate issued for it proves control of it;
- ``control``: the host of ``APPDECK_PUBLIC_URL``.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.ingress.certs import NAME
from appdeck.ingress.hosts import normalize
from appdeck.model.hostnames import routable_tenant, route_label
from appdeck.storage.schema import apps, deployments
from appdeck.storage.tls import WantedRow


def cert_name(host: str) -> str:
    """The certificate's name in the data plane: the hostname when it fits the name rule,
    else a digest of it (hostnames run to 253 characters, names to 128)."""
    if NAME.fullmatch(host):
        return host
    return "h-" + hashlib.sha256(host.encode()).hexdigest()[:40]


class ClaimedDomains(Protocol):
    """The domains service's custom domains, claimed by an app (verified or not yet)."""

    async def claimed(self) -> list[tuple[int, str, str]]:
        """(app id, tenant id, domain) of every claimed domain."""
        ...


class NamesSource(Protocol):
    async def wanted(self) -> list[WantedRow]: ...


class PlatformNames:
    """The names the platform's own tables call for (see the module docstring)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        apps_domain: str | None,
        public_host: str | None,
        domains: ClaimedDomains | None = None,
    ) -> None:
        self._engine = engine
        self._apps_domain = apps_domain
        self._public_host = normalize(public_host) if public_host else None
        self._domains = domains

    async def wanted(self) -> list[WantedRow]:
        rows: list[WantedRow] = []
        if self._public_host:
            public = self._public_host
            rows.append(WantedRow(cert_name(public), (public,), "control"))
        if self._apps_domain:
            live = (
                sa.select(apps.c.id, apps.c.name, apps.c.tenant_id)
                .where(
                    sa.exists().where(
                        deployments.c.app_id == apps.c.id, deployments.c.state == "live"
                    )
                )
                .order_by(apps.c.id)
            )
            async with self._engine.connect() as conn:
                found = (await conn.execute(live)).all()
            for app_id, name, tenant in found:
                label = normalize(f"{route_label(name, tenant)}.{self._apps_domain}")
                if label and routable_tenant(tenant):
                    rows.append(WantedRow(cert_name(label), (label,), "app", tenant, int(app_id)))
        if self._domains is not None:
            for app_id, tenant, domain in await self._domains.claimed():
                custom = normalize(domain)
                if custom:
                    rows.append(WantedRow(cert_name(custom), (custom,), "domain", tenant, app_id))
        return rows
