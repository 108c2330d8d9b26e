"""The app sandbox and the runtime in front of it, as ``appdeck serve`` assembles them (the
composition root, :mod:`appdeck.app`, calls these first)."""

from __future__ import annotations

import logging

from appdeck.ingress.haproxy.config import Layout
from appdeck.ingress.haproxy.namespaces import Namespaces
from appdeck.ingress.haproxy.plane import HAProxyCounters, HAProxyDataPlane, HAProxyTable
from appdeck.ingress.hosts import HostMap
from appdeck.ingress.keys import KeyGate
from appdeck.ingress.routes import Counters, RouteTable
from appdeck.ingress.server import IngressServer
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.runtime import sandbox
from appdeck.runtime.disks import open_disks
from appdeck.runtime.egress import EgressPolicy, EgressProxy
from appdeck.runtime.install import InstallConflict, InstallLock, identify, sandboxed
from appdeck.runtime.local import LocalDriver
from appdeck.runtime.sandbox import Sandbox
from appdeck.settings import Settings
from appdeck.transport.http11 import bounded_protocol, http_limits

log = logging.getLogger("appdeck")


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


def runtime_of(
    settings: Settings, runtime: Sandbox | None
) -> tuple[LocalDriver, IngressServer | HAProxyDataPlane, IngressRouter]:
    """The runtime driver and the ingress in front of its instances (not started yet): the
    Python ingress, or HAProxy (``APPDECK_DATA_PLANE=haproxy``)."""
    egress = EgressProxy(EgressPolicy(networks=tuple(settings.egress_allow)))
    disks = open_disks(  # issue 19: each app's disk, limited
        settings.data_dir / "disks",
        settings.disk_quota,
        default_mb=settings.app_disk_mb,
        sandboxed=runtime is not None,
        appdb=settings.data_dir / "appdb" if settings.database().startswith("sqlite") else None,
    )
    if disks.restore():
        log.info("app disks mounted: %s", disks.root)
    driver = LocalDriver(
        settings.data_dir / "runtime",
        sandbox=runtime,
        egress=egress if runtime is not None else None,
        disks=disks,
        disk_check_s=settings.disk_check_seconds,
    )
    if settings.data_plane == "haproxy":
        return driver, *_haproxy_of(settings, driver)
    extra = [settings.apps_domain] if settings.apps_domain else []
    table, counters = RouteTable(extra_domains=extra, hosts=HostMap()), Counters()
    ingress = IngressServer(
        table,
        counters,
        host=settings.host,
        port=settings.ingress_port,
        http=bounded_protocol(http_limits(settings), coalescing=False),
        limit_concurrency=settings.max_concurrency,
    )
    ingress.proxy.netns = driver.netns_fd  # sandboxed instances: their own loopback
    gate = KeyGate()  # closed (503) until Platform.start loads the apps' API keys
    ingress.proxy.keys = gate
    return driver, ingress, IngressRouter(table, counters, gate)


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
    ) -> None:
        super().__init__(table, counters, keys)
        self.plane = plane

    async def published(self) -> None:
        await super().published()
        if self.plane.settled and not await self.plane.synced():
            log.error("HAProxy did not take a route change in time")


def _haproxy_of(settings: Settings, driver: LocalDriver) -> tuple[HAProxyDataPlane, IngressRouter]:
    install = identify(settings.data_dir)
    extra = [settings.apps_domain] if settings.apps_domain else []
    table = HAProxyTable(extra_domains=extra, hosts=HostMap())  # the edge mirrors the hosts
    counters, gate = HAProxyCounters(), KeyGate()
    plane = HAProxyDataPlane(  # edge=: the edge helper's EdgeMirror, wired by the lead
        table,
        counters,
        Layout(settings.runtime_root / install.id / "haproxy"),
        host=settings.host,
        port=settings.ingress_port,
        namespaces=Namespaces(install.id, driver.netns_fd),
        binary=settings.haproxy_binary,
        gate=gate,  # without the edge, a route needing an API key answers 503, unserved
    )
    return plane, HAProxyRouter(table, counters, gate, plane)
