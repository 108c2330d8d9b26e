"""The deploy engine's runtime port on a runtime driver (the local one by default): the
release goes to the driver as it is; instances come back as upstreams for the router."""

from __future__ import annotations

import asyncio
import time

from appdeck.platform.deploy.ports import (
    BuildFailed,
    DiskUsage,
    Instance,
    InstanceStatus,
    InstanceWatcher,
    Release,
)
from appdeck.runtime import driver as rt
from appdeck.runtime import listening
from appdeck.runtime.procs import free_port

HEALTH_POLL_S = (0.02, 0.2)
"""Health checks while an instance starts: every 20 ms at first (most apps answer within
100-200 ms), backing off to every 200 ms for slow starters."""
SANDBOX_PORT = 8000
"""An instance's port when the spec names none: every sandboxed instance has a loopback of
its own, so they may all use the same."""


def upstream(ref: rt.InstanceRef) -> str:
    """Where the ingress reaches an instance (see ``ingress.routes.UPSTREAM_HOST``)."""
    address = f"127.0.0.1:{ref.port}"
    return f"{ref.netns}@{address}" if ref.netns else address


class LocalRuntime:
    def __init__(self, driver: rt.RuntimeDriver, *, sandboxed: bool = False) -> None:
        self.driver = driver
        self.sandboxed = sandboxed
        self._refs: dict[tuple[str, int], rt.InstanceRef] = {}
        self._last: dict[tuple[str, int], rt.Health] = {}
        """The last failed health check of an instance that was starting."""

    async def prepare(self, release: Release) -> None:
        try:
            await self.driver.prepare(release)
        except BuildFailed as exc:
            # Without the log's tail: it is app output (it may print its secrets, or
            # instructions to an agent), which only tail_deploy_logs hands out, masked.
            raise BuildFailed(
                f"{exc.message}; read the build log (tail_deploy_logs with kind 'build')",
                release_id=exc.release_id,
                step=exc.step,
                exit_code=exc.exit_code,
                timed_out=exc.timed_out,
            ) from None

    async def start(self, release: Release, index: int) -> Instance:
        # Sandboxed, the port is inside the instance's own network namespace; unsandboxed,
        # never a port the app names (it could be the control plane's).
        port = (release.spec.port or SANDBOX_PORT) if self.sandboxed else free_port()
        ref = await self.driver.launch(release, index, port)
        self._refs[(release.release_id, index)] = ref
        return Instance(release.release_id, index, upstream(ref))

    async def wait_healthy(self, release: Release, instance: Instance, within_s: float) -> bool:
        ref = self._refs.get((instance.release_id, instance.index))
        if ref is None:
            return False
        deadline, poll = time.monotonic() + within_s, HEALTH_POLL_S[0]
        key = (instance.release_id, instance.index)
        while time.monotonic() < deadline:
            health = await self.driver.health(ref)
            if health.ok:
                self._last.pop(key, None)
                return True
            self._last[key] = health
            if await self.driver.unhealthy(instance.release_id):
                return False
            await asyncio.sleep(poll)
            poll = min(poll * 1.5, HEALTH_POLL_S[1])
        return False

    async def why_unhealthy(self, release: Release, instance: Instance) -> str:
        key = (instance.release_id, instance.index)
        last, ref = self._last.pop(key, None), self._refs.get(key)
        if await self.driver.unhealthy(instance.release_id):
            exits = [s.last_exit for s in self.driver.inspect(instance.release_id) if s.last_exit]
            ended = f"; it last ended with {exits[0]}" if exits else ""
            return f"the app kept crashing{ended} (the runtime log has its output)"
        if ref is None or ref.pid <= 0:
            return last.detail if last is not None else "no check answered"
        if last is not None and last.status is not None:
            return f"{last.detail}: serve {release.spec.health_check.path} or change health_check"
        ports = await asyncio.to_thread(
            listening.listening_ports, ref.pid, own_netns=ref.netns is not None
        )
        return listening.explain(ref.port, ports) or (
            last.detail if last is not None else "no check answered"
        )

    async def stop(self, release_id: str, index: int | None = None) -> None:
        await self.driver.stop(release_id, index)
        for key in [
            k for k in self._refs if k[0] == release_id and (index is None or k[1] == index)
        ]:
            del self._refs[key]
            self._last.pop(key, None)

    async def running(self, release_id: str) -> list[Instance]:
        refs = await self.driver.instances(release_id)
        for ref in refs:
            self._refs[(release_id, ref.index)] = ref
        return [Instance(release_id, r.index, upstream(r)) for r in refs]

    async def adopt(self, release: Release) -> list[Instance]:
        found = await self.driver.adopt(release.release_id, release)
        for ref in found.adopted:
            self._refs[(release.release_id, ref.index)] = ref
        return [Instance(release.release_id, r.index, upstream(r)) for r in found.adopted]

    async def crash_looping(self, release_id: str) -> bool:
        return await self.driver.unhealthy(release_id)

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        return self.driver.inspect(release_id)

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        return self.driver.disk_usage(app_id)

    def watch(self, watcher: InstanceWatcher) -> None:
        self.driver.watch(watcher)
