"""Where an app answers: ``<app>--<tenant>.<apps domain>`` when the operator set one (listed
first: the URL people outside this machine reach), and always ``<app>--<tenant>.localhost`` on
the ingress port. A hostname's URL is ``https://`` once the ACME part reports a live
certificate for it, else ``http://`` on the public port (``APPDECK_APPS_PUBLIC_PORT``, default
the ingress port; 80 is left out of the URL)."""

from __future__ import annotations

from dataclasses import dataclass, field

from appdeck.model import hostnames
from appdeck.platform.domains.proof import NoTls, TlsStatus


@dataclass(frozen=True, slots=True)
class AppUrls:
    ingress_port: int
    apps_domain: str | None = None
    public_port: int | None = None
    tls: TlsStatus = field(default_factory=NoTls)
    local: bool = True
    """Apps answer on this host's ingress too (``<app>--<tenant>.localhost``); False: a
    cluster's gateway serves them, at their apps-domain host only."""

    def of_host(self, host: str) -> str:
        """The URL of a public hostname (the apps domain's or a custom domain)."""
        status = self.tls.status_of(host)
        if status is not None and status.get("live") is True:
            port = status.get("port", 443)
            return f"https://{host}/" if port == 443 else f"https://{host}:{port}/"
        port = self.public_port if self.public_port is not None else self.ingress_port
        return f"http://{host}/" if port == 80 else f"http://{host}:{port}/"

    def public_host(self, app_name: str, tenant: str) -> str | None:
        if not self.apps_domain:
            return None
        return hostnames.hostname(app_name, tenant, self.apps_domain)

    def all(self, app_name: str, tenant: str) -> list[str]:
        """The app's URLs, the public one first."""
        public = [] if (host := self.public_host(app_name, tenant)) is None else [host]
        local = [hostnames.url(app_name, tenant, self.ingress_port)] if self.local else []
        return [self.of_host(host) for host in public] + local

    def primary(self, app_name: str, tenant: str) -> str:
        """The URL to show first (``AppView.url``)."""
        return self.all(app_name, tenant)[0]
