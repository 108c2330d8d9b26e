"""How a deploy gives traffic back when it ends early, and a driver whose stops wait for the
route changes made before them (the deploy engine's; every strategy moves traffic first)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appdeck.platform.deploy.locks import Hold
from appdeck.platform.deploy.ports import (
    Adoption,
    Backend,
    Capabilities,
    DiskUsage,
    Driver,
    Instance,
    InstanceStatus,
    InstanceWatcher,
    LogKind,
    LogPage,
    Readiness,
    Release,
    RouterPort,
)
from appdeck.storage.app_locks import Fenced


class RoutesFirst:
    """A driver whose ``stop`` waits (bounded) for the route changes made so far to reach
    the other replicas: every strategy moves traffic off instances before stopping them,
    and another replica's ingress must have moved too. Everything else is the driver's."""

    def __init__(self, driver: Driver, router: Callable[[], RouterPort]) -> None:
        self._driver = driver
        self._router = router

    def capabilities(self) -> Capabilities:
        return self._driver.capabilities()

    async def prepare(self, release: Release, *, rebuild: bool = False) -> None:
        await self._driver.prepare(release, rebuild=rebuild)

    async def start(self, release: Release, index: int) -> Instance:
        return await self._driver.start(release, index)

    async def wait_ready(self, release: Release, instance: Instance, within_s: float) -> Readiness:
        return await self._driver.wait_ready(release, instance, within_s)

    async def gave_up(self, release_id: str) -> bool:
        return await self._driver.gave_up(release_id)

    async def stop(self, release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        await self._router().published()
        await self._driver.stop(release_id, index, grace_s)

    async def running(self, release_id: str) -> list[Instance]:
        return await self._driver.running(release_id)

    async def recover(self, release: Release) -> Adoption:
        return await self._driver.recover(release)

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        return self._driver.inspect(release_id)

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        return self._driver.disk_usage(app_id)

    def events(self, watcher: InstanceWatcher) -> None:
        self._driver.events(watcher)

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage:
        return await self._driver.logs(release_id, kind, cursor, limit, grep)

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage:
        return await self._driver.follow(release_id, kind, cursor, limit, grep, timeout_s)

    async def releases(self) -> list[str]:
        return await self._driver.releases()

    async def remove(self, release_id: str) -> None:
        await self._driver.remove(release_id)

    async def remove_app(self, app_id: int) -> None:
        await self._driver.remove_app(app_id)

    async def detach(self) -> None:
        await self._driver.detach()


async def abort_held(
    held: Hold,
    runtime: Driver,
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
    runtime: Driver,
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
