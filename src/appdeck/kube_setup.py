"""``APPDECK_RUNTIME=kubernetes`` as ``appdeck serve`` assembles it (docs/kubernetes.md,
"Serving with APPDECK_RUNTIME=kubernetes"): releases are built on this host by the local
driver and run on the cluster by the Kubernetes driver (:class:`BuiltHereRunThere`); their
traffic goes through the cluster's Gateway (:class:`GatewayRoutes` over the Gateway API
router), so no HAProxy data plane is started for apps.

Imported by the composition root only when the setting asks for it: a local server never
loads the Kubernetes client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

from appdeck.common.errors import Unavailable
from appdeck.model.release import Release
from appdeck.platform.deploy.gateway_routes import GatewayRoutes
from appdeck.platform.workspace_tars import WorkspaceTars
from appdeck.runtime.composite import BuiltHereRunThere
from appdeck.runtime.disks import AppDisks
from appdeck.runtime.kubernetes.api import KubeApi, KubeError
from appdeck.runtime.kubernetes.config import connected, driver_from, router_from
from appdeck.runtime.kubernetes.driver import KubernetesDriver
from appdeck.runtime.sandbox import Sandbox
from appdeck.runtime_setup import Served, local_driver
from appdeck.settings import Settings

__all__ = ["SourceTokens", "cluster_of", "pod_reads", "served_there"]

log = logging.getLogger("appdeck.runtime.kubernetes")
READ_PODS_S: Final = 5.0
"""How often every AppDeck pod is read (one list): instance states, restarts and crash events
(``inspect``, ``events``) are as of the last read; the health sampler's period."""


class SourceTokens:
    """A release's workspace token (its pods' source Secret), made by the platform's
    :class:`WorkspaceTars`, which is built after the driver: given to it once built."""

    def __init__(self) -> None:
        self.tars: WorkspaceTars | None = None

    def __call__(self, release: Release) -> str:
        if self.tars is None:
            raise Unavailable("the workspace endpoint is not up yet", hint="try again")
        return self.tars.token(release.release_id)


async def cluster_of(settings: Settings) -> KubeApi:
    """The cluster's API, answering (before the server opens anything); else
    :class:`~appdeck.settings.InvalidSetting` in one line."""
    return await connected(settings)


def served_there(
    settings: Settings,
    runtime: Sandbox | None,
    api: KubeApi,
    *,
    disks: AppDisks,
    tokens: SourceTokens,
) -> Served:
    """The composite driver (built here by the local driver over ``runtime`` and ``disks``,
    run on the cluster) and the router writing the apps' HTTPRoutes; the API client is let
    go of at stop."""
    builder = local_driver(settings, runtime, disks=disks)  # builds only: no DATABASE_URL
    runner = driver_from(settings, api, tokens)
    router = GatewayRoutes(router_from(settings, api))
    watch = pod_reads(runner)
    return Served(BuiltHereRunThere(builder, runner), router, release=api.client.close, watch=watch)


def pod_reads(runner: KubernetesDriver) -> Callable[[asyncio.Event], Coroutine[Any, Any, None]]:
    async def read_pods(stopping: asyncio.Event) -> None:
        """Every :data:`READ_PODS_S` until ``stopping``: the pods read (a failed read logged,
        the last one kept)."""
        while not stopping.is_set():
            try:
                await runner.refresh()
            except KubeError as exc:
                log.warning("the cluster's pods were not read: %s", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(READ_PODS_S):
                    await stopping.wait()

    return read_pods
