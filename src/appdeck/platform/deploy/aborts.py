"""How a deploy gives traffic back when it ends early, and a runtime whose stops wait for the
route changes made before them (the deploy engine's; every strategy moves traffic first)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appdeck.platform.deploy.locks import Hold
from appdeck.platform.deploy.ports import (
    Backend,
    DiskUsage,
    Instance,
    InstanceStatus,
    InstanceWatcher,
    Release,
    RouterPort,
    RuntimePort,
)
from appdeck.storage.app_locks import Fenced


class RoutesFirst:
    """A runtime whose ``stop`` waits (bounded) for the route changes made so far to reach
    the other replicas: every strategy moves traffic off instances before stopping them,
    and another replica's ingress must have moved too."""

    def __init__(self, runtime: RuntimePort, router: Callable[[], RouterPort]) -> None:
        self._runtime = runtime
        self._router = router

    async def prepare(self, release: Release) -> None:
        await self._runtime.prepare(release)

    async def start(self, release: Release, index: int) -> Instance:
        return await self._runtime.start(release, index)

    async def wait_healthy(self, release: Release, instance: Instance, within_s: float) -> bool:
        return await self._runtime.wait_healthy(release, instance, within_s)

    async def why_unhealthy(self, release: Release, instance: Instance) -> str:
        return await self._runtime.why_unhealthy(release, instance)

    async def stop(self, release_id: str, index: int | None = None) -> None:
        await self._router().published()
        await self._runtime.stop(release_id, index)

    async def running(self, release_id: str) -> list[Instance]:
        return await self._runtime.running(release_id)

    async def adopt(self, release: Release) -> list[Instance]:
        return await self._runtime.adopt(release)

    async def crash_looping(self, release_id: str) -> bool:
        return await self._runtime.crash_looping(release_id)

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        return self._runtime.inspect(release_id)

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        return self._runtime.disk_usage(app_id)

    def watch(self, watcher: InstanceWatcher) -> None:
        self._runtime.watch(watcher)


async def abort_held(
    held: Hold,
    runtime: RuntimePort,
    router: RouterPort,
    new: Release,
    old: Release | None,
    old_instances: list[Any],
) -> None:
    """:func:`plan_abort` under the app's lease, confirmed first: a route broadcast carries
    no fence, so a holder that lost the lease (paused past it, say) must not route the app
    back over what its new holder did; it stops quietly (``Fenced``)."""
    if held.lost or not await held.confirm():
        raise Fenced(f"app {new.app_id}: the lease fenced {held.lease.fence} was lost")
    await plan_abort(runtime, router, new, old, old_instances)


async def plan_abort(
    runtime: RuntimePort,
    router: RouterPort,
    new: Release,
    old: Release | None,
    old_instances: list[Any],
) -> None:
    if old is not None and old_instances:
        router.route(
            new.route, [Backend(old.release_id, 100, tuple(i.upstream for i in old_instances))]
        )
    else:
        router.unroute(new.route)
    await runtime.stop(new.release_id)
