"""The app sandbox and the runtime in front of it, as ``appdeck serve`` assembles them (the
composition root, :mod:`appdeck.app`, calls these first)."""

from __future__ import annotations

import logging

from appdeck.ingress.hosts import HostMap
from appdeck.ingress.keys import KeyGate
from appdeck.ingress.routes import Counters, RouteTable
from appdeck.ingress.server import IngressServer
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.runtime import sandbox
from appdeck.runtime.disks import open_disks
from appdeck.runtime.egress import EgressPolicy, EgressProxy
from appdeck.runtime.install import InstallConflict, InstallLock, sandboxed
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
) -> tuple[LocalDriver, IngressServer, IngressRouter]:
    """The runtime driver and the ingress in front of its instances (not started yet)."""
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
