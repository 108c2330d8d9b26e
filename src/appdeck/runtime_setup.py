"""The app sandbox and the runtime in front of it, as ``appdeck serve`` assembles them (the
composition root, :mod:`appdeck.app`, calls these first)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from appdeck.common.errors import Unavailable
from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.haproxy.config import Layout
from appdeck.ingress.haproxy.edge import EdgeOptions, EdgePaths, control_secret
from appdeck.ingress.haproxy.joined import JoinedEdge
from appdeck.ingress.haproxy.mirror import MirrorError
from appdeck.ingress.haproxy.namespaces import Namespaces
from appdeck.ingress.haproxy.plane import HAProxyCounters, HAProxyDataPlane, HAProxyTable
from appdeck.ingress.haproxy.runtime_api import RuntimeApiError
from appdeck.ingress.hosts import HostMap
from appdeck.ingress.keys import KeyGate
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.platform.domains.proof import ServedCertificates, TlsStatus
from appdeck.runtime import sandbox
from appdeck.runtime.appdb import DatabaseAccess
from appdeck.runtime.disks import AppDisks, open_disks
from appdeck.runtime.driver import Driver
from appdeck.runtime.egress import EgressPolicy, EgressProxy
from appdeck.runtime.install import InstallConflict, InstallLock, identify, sandboxed
from appdeck.runtime.local import LocalDriver
from appdeck.runtime.sandbox import Sandbox
from appdeck.settings import Settings
from appdeck.transport.edge_forwarded import TrustEdge
from appdeck.transport.responses import ASGIApp

log = logging.getLogger("appdeck")
KEYS_WITHIN_S = 10.0
"""A key made or revoked is in HAProxy within this, or the call says it is not yet."""


def sandbox_of(settings: Settings) -> tuple[Sandbox | None, InstallLock | None]:
    """The sandbox and the hold on its install's uids (``install.sandboxed``), or None (``off``;
    ``auto`` where it cannot sandbox: warned); another install's uids always stop the start."""
    reason = "APPDECK_SANDBOX=off"
    if settings.sandbox != "off":
        try:
            return sandboxed(
                settings.data_dir,
                uid_base=settings.sandbox_uid_base,
                cgroup=settings.sandbox_cgroup,
                registry=settings.install_registry,
                runtime_root=settings.runtime_root,
            )
        except sandbox.SandboxUnavailable as exc:
            if settings.sandbox == "on" or isinstance(exc, InstallConflict):
                raise  # another install's uids: never a reason to run apps unconfined
            reason = str(exc)
    log.warning(
        "apps run UNSANDBOXED (%s): they run as the server's user and can read its data dir, "
        "keys and database; never let more than one trusted tenant deploy here",
        reason,
    )
    return None, None


def disks_of(settings: Settings, runtime: Sandbox | None) -> AppDisks:
    """Each app's disk, limited (issue 19), mounted again after a reboot: built before the
    apps' databases (their SQLite directories go on it) and the driver (its workspaces)."""
    disks = open_disks(
        settings.data_dir / "disks",
        settings.disk_quota,
        default_mb=settings.app_disk_mb,
        sandboxed=runtime is not None,
        appdb=settings.data_dir / "appdb" if settings.database().startswith("sqlite") else None,
    )
    if disks.restore():
        log.info("app disks mounted: %s", disks.root)
    return disks


async def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Served:
    """What runs the apps and carries their traffic, as the composition root holds it."""

    driver: Driver
    router: IngressRouter
    ingress: HAProxyDataPlane | None = None
    """This host's data plane, HAProxy (None: a cluster's gateway carries the apps' traffic)."""
    edge: JoinedEdge | None = None
    """HAProxy's edge (API keys, custom domains, TLS, the control plane); None: none here."""
    release: Callable[[], Awaitable[None]] = _nothing
    """Let go of what the runtime holds besides the router (a cluster's API client)."""
    watch: Callable[[asyncio.Event], Coroutine[Any, Any, None]] | None = None
    """The runtime's own loop until the event is set (a cluster's pods read), if any."""


def local_driver(
    settings: Settings,
    runtime: Sandbox | None,
    *,
    disks: AppDisks,
    databases: DatabaseAccess | None = None,
) -> LocalDriver:
    """The local driver over ``disks`` (instances get ``DATABASE_URL`` from ``databases``;
    None: none), its builds and instances reaching out through the egress proxy."""
    egress = EgressProxy(EgressPolicy(networks=tuple(settings.egress_allow)))
    return LocalDriver(
        settings.data_dir / "runtime",
        sandbox=runtime,
        egress=egress if runtime is not None else None,
        databases=databases,
        disks=disks,
        disk_check_s=settings.disk_check_seconds,
    )


def runtime_of(
    settings: Settings,
    runtime: Sandbox | None,
    *,
    disks: AppDisks,
    databases: DatabaseAccess | None = None,
    control_port: int = 0,
) -> tuple[LocalDriver, HAProxyDataPlane, HAProxyRouter]:
    """The runtime driver over ``disks`` (:func:`local_driver`) and the data plane in front
    of its instances, HAProxy (not started yet), with the platform's router over it."""
    driver = local_driver(settings, runtime, disks=disks, databases=databases)
    return driver, *_haproxy_of(settings, driver, control_port)


# -- issue 21 §1: the HAProxy data plane ------------------------------------------------------


class HAProxyRouter(IngressRouter):
    """The platform's router over HAProxy's table: a route change counts as published once
    the other replicas have it *and* this host's HAProxy runs it (read back)."""

    def __init__(
        self,
        table: HAProxyTable,
        counters: HAProxyCounters,
        keys: KeyGate,
        plane: HAProxyDataPlane,
        edge: JoinedEdge,
    ) -> None:
        super().__init__(table, counters, keys)
        self.plane = plane
        self.edge = edge

    async def keys_published(self) -> None:
        """HAProxy checks keys as the gate says now (its maps read back)."""
        try:
            async with asyncio.timeout(KEYS_WITHIN_S):
                await self.edge.sync()
        except (TimeoutError, MirrorError, RuntimeApiError, OSError) as exc:
            log.error("HAProxy did not take an API key change: %s", exc)
            raise Unavailable(
                "the data plane did not take the API key change yet",
                hint="it is retried in the background; try again in a few seconds",
            ) from None

    async def edge_published(self) -> None:
        """HAProxy serves the host map as it is now (read back); logged, not raised, when it
        does not within the bound: the change is made and the mirror retries it."""
        try:
            async with asyncio.timeout(KEYS_WITHIN_S):
                await self.edge.sync()
        except (TimeoutError, MirrorError, RuntimeApiError, OSError) as exc:
            log.error("HAProxy did not take a custom domain change in time: %s", exc)

    async def published(self) -> None:
        await super().published()
        if self.plane.settled and not await self.plane.synced():
            log.error("HAProxy did not take a route change in time")


def _haproxy_of(
    settings: Settings, driver: LocalDriver, control_port: int
) -> tuple[HAProxyDataPlane, HAProxyRouter]:
    install = identify(settings.data_dir)
    extra = [settings.apps_domain] if settings.apps_domain else []
    table = HAProxyTable(extra_domains=extra, hosts=HostMap())  # the edge mirrors the hosts
    counters, gate = HAProxyCounters(), KeyGate()
    layout = Layout(settings.runtime_root / install.id / "haproxy")
    plane = HAProxyDataPlane(
        table,
        counters,
        layout,
        host=settings.host,
        port=settings.ingress_port,
        namespaces=Namespaces(install.id, driver.netns_fd),
        binary=settings.haproxy_binary,
        proxy=ProxyConfig(  # the client limits the control plane's listener has too
            header_timeout=settings.header_timeout_seconds,
            max_headers=settings.max_headers,
            log_target=settings.data_plane_log,
        ),
    )
    plane.edge = edge = JoinedEdge(  # API keys, custom domains, ACME, TLS, the control plane
        EdgePaths(layout.directory / "edge"),
        edge_options(settings, control_port),
        plane.process.stats,
        hosts=plane.hosts,
        challenges=plane.challenges,
        certs=plane.certificates,
        gate=gate,
    )
    # a started instance's server is in HAProxy (weight 0) by the time its health check
    # passes: moving traffic to it then changes weights, without a reload in the way
    driver.started.append(
        lambda r, i: table.expect(r.route, i.release_id, i.index, i.upstream, of=r.spec.instances)
    )
    return plane, HAProxyRouter(table, counters, gate, plane, edge)


def _loopback(host: str) -> str:
    """Where this host's own listeners are reached from HAProxy (a wildcard: loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def edge_options(settings: Settings, control_port: int) -> EdgeOptions:
    """The edge's options from the settings: HTTPS on ``APPDECK_HTTPS_PORT``; the control
    plane at an https ``APPDECK_PUBLIC_URL`` when it is served through HAProxy (the listener
    of this ``appdeck serve``: ``control_port``, 0 = none)."""
    s = settings
    public = urlsplit(s.public_url) if s.public_url else None
    served = public is not None and public.scheme == "https" and s.https_port and control_port
    wild = s.host in ("0.0.0.0", "::", "")
    return EdgeOptions(
        https_bind=None
        if s.https_port is None
        else f"{'' if wild else _loopback(s.host)}:{s.https_port}",
        https_port=s.https_port or 443,
        hsts_seconds=s.hsts_seconds,
        control_host=(public.hostname or None) if served and public is not None else None,
        control_servers=(f"{_loopback(s.host)}:{control_port}",) if served else (),
        metrics_port=s.data_plane_metrics_port,
    )


def behind_edge(app: ASGIApp, edge: JoinedEdge | None) -> ASGIApp:
    """``app`` as served: when HAProxy serves the control plane (an https public URL), it
    believes HAProxy's ``X-Forwarded-For``/``-Proto`` (and only HAProxy's: the secret)."""
    if edge is not None and edge.options.control_servers:
        return TrustEdge(app, control_secret(edge.paths))
    return app


def served_certificates(
    settings: Settings,
    ingress: HAProxyDataPlane | None,
    orders: TlsStatus | None = None,
) -> ServedCertificates | None:
    """The TLS state ``get_app_url`` shows: certificates are served with an HTTPS listener
    of this host's data plane only (without one every app URL stays ``http://``); ``orders``
    (the TLS service's states) adds what each certificate's order is doing."""
    if settings.https_port is None or ingress is None:
        return None
    return ServedCertificates(ingress.certificates, settings.https_port, orders=orders)
