"""What runs the apps, as the settings ask for it: the refusals before anything opens, the
cluster's API on Kubernetes, the apps' own databases, and the runtime with its router (the
local sandbox behind HAProxy, or built here and run on the cluster). Used by
:class:`appdeck.app.Services`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from appdeck import runtime_setup as setup
from appdeck.platform.services import Platform
from appdeck.platform.tables.databases import AppDatabases, open_databases
from appdeck.platform.tls.pem import load_operator_files
from appdeck.runtime.disks import AppDisks
from appdeck.runtime.sandbox import Sandbox
from appdeck.settings import InvalidSetting, Settings

if TYPE_CHECKING:
    from appdeck.runtime.kubernetes.api import KubeApi


async def app_databases(
    settings: Settings, runtime: Sandbox | None, disks: AppDisks
) -> AppDatabases:
    """Each app's own database, reached by its instances (``DATABASE_URL``) on its disk."""
    return await open_databases(
        settings.database(),
        settings.data_dir,
        apps_url=settings.apps_database_url,
        role_prefix=settings.apps_role_prefix,
        uid_for=runtime.uid_for if runtime is not None else None,
        secret_key=settings.secret_key,
        place=disks.place,  # on the app's disk (issue 19)
    )


def refuse_before_opening(settings: Settings) -> None:
    """What the server does not serve, or bad TLS files: refused before anything opens (a
    host that cannot sandbox is refused next, by ``sandbox_of``; a cluster that does not
    answer, by ``kube_setup.cluster_of``)."""
    if settings.runtime == "kubernetes":
        for name, value in (
            ("APPDECK_REDIS_URL", settings.redis_url),  # replicas
            ("APPDECK_HTTPS_PORT", settings.https_port),  # TLS: the Gateway's listener's
        ):
            if value:
                raise InvalidSetting(
                    name, "is not served with APPDECK_RUNTIME=kubernetes yet (docs/kubernetes.md)"
                )
    if settings.tls_cert is not None and settings.tls_key is not None:
        load_operator_files(settings.tls_cert, settings.tls_key, time.time())


async def served(
    settings: Settings,
    runtime: Sandbox | None,
    kube: KubeApi | None,
    *,
    disks: AppDisks,
    databases: AppDatabases,
    control_port: int,
) -> tuple[setup.Served, Callable[[Platform], None]]:
    """The runtime and the apps' router the settings ask for, and what to hand the platform
    once it is built (a Kubernetes release's workspace token is the platform's)."""
    if kube is None:
        driver, plane, haproxy = setup.runtime_of(
            settings, runtime, disks=disks, databases=databases, control_port=control_port
        )
        return setup.Served(driver, haproxy, plane, haproxy.edge), lambda _platform: None
    from appdeck import kube_setup

    tokens = kube_setup.SourceTokens()

    def built(platform: Platform) -> None:
        tokens.tars = platform.workspaces

    return kube_setup.served_there(settings, runtime, kube, disks=disks, tokens=tokens), built


async def cluster_of(settings: Settings) -> KubeApi | None:
    """The cluster's API when apps run on Kubernetes (checked: it answers), else None."""
    if settings.runtime != "kubernetes":
        return None
    from appdeck import kube_setup

    return await kube_setup.cluster_of(settings)
