"""The deploy engine's Runtime port on the local process driver."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from appdeck.platform.deploy.ports import BuildFailed, Instance, Release
from appdeck.platform.runtime import driver as rt

HEALTH_POLL_S = 0.2
SANDBOX_PORT = 8000
"""An instance's port when the spec names none: every sandboxed instance has a loopback of
its own, so they may all use the same."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def release_spec(release: Release) -> rt.ReleaseSpec:
    spec = release.spec
    health = spec.get("health_check") or {}
    resources = spec.get("resources") or {}
    return rt.ReleaseSpec(
        app_id=release.app_id,
        app_name=release.app_name,
        release_id=release.release_id,
        source_path=Path(str(spec.get("source_path") or "")),
        runtime=spec.get("runtime", "python"),
        build_command=spec.get("build_command"),
        run_command=spec.get("run_command"),
        env=dict(release.env),
        instances=int(spec.get("instances", 1)),
        health_path=str(health.get("path", "/")),
        health_timeout_s=float(health.get("timeout_s", 5)),
        build_timeout_s=float(spec.get("build_timeout_s", 600)),
        outbound=bool((spec.get("network") or {}).get("outbound", False)),
        memory_mb=int(resources.get("memory_mb", 512)),
        cpus=float(resources.get("cpus", 1.0)),
        pids=int(resources.get("pids", 256)),
    )


def upstream(ref: rt.InstanceRef) -> str:
    """Where the ingress reaches an instance (see ``ingress.routes.UPSTREAM_HOST``)."""
    address = f"127.0.0.1:{ref.port}"
    return f"{ref.netns}@{address}" if ref.netns else address


class LocalRuntime:
    def __init__(self, driver: rt.RuntimeDriver, *, sandboxed: bool = False) -> None:
        self.driver = driver
        self.sandboxed = sandboxed
        self._refs: dict[tuple[str, int], rt.InstanceRef] = {}

    async def prepare(self, release: Release) -> None:
        try:
            await self.driver.prepare(release_spec(release))
        except rt.BuildFailed as exc:
            # Not the log's tail: it is app output (it may print its secrets, or instructions
            # to an agent), which only tail_deploy_logs hands out, masked for the caller.
            raise BuildFailed(
                f"{exc.message}; read the build log (tail_deploy_logs with kind 'build')"
            ) from None

    async def start(self, release: Release, index: int) -> Instance:
        # Sandboxed, the port is inside the instance's own network namespace; unsandboxed,
        # never a port the app names (it could be the control plane's).
        port = int(release.spec.get("port") or SANDBOX_PORT) if self.sandboxed else free_port()
        ref = await self.driver.start(release_spec(release), index, port)
        self._refs[(release.release_id, index)] = ref
        return Instance(release.release_id, index, upstream(ref))

    async def wait_healthy(self, release: Release, instance: Instance, within_s: float) -> bool:
        ref = self._refs.get((instance.release_id, instance.index))
        if ref is None:
            return False
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if (await self.driver.health(ref)).ok:
                return True
            if await self.driver.unhealthy(instance.release_id):
                return False
            await asyncio.sleep(HEALTH_POLL_S)
        return False

    async def stop(self, release_id: str, index: int | None = None) -> None:
        await self.driver.stop(release_id, index)
        for key in [
            k for k in self._refs if k[0] == release_id and (index is None or k[1] == index)
        ]:
            del self._refs[key]

    async def running(self, release_id: str) -> list[Instance]:
        refs = await self.driver.instances(release_id)
        for ref in refs:
            self._refs[(release_id, ref.index)] = ref
        return [Instance(release_id, r.index, upstream(r)) for r in refs]

    async def adopt(self, release: Release) -> list[Instance]:
        found = await self.driver.adopt(release.release_id, release_spec(release))
        for ref in found.adopted:
            self._refs[(release.release_id, ref.index)] = ref
        return [Instance(release.release_id, r.index, upstream(r)) for r in found.adopted]

    async def crash_looping(self, release_id: str) -> bool:
        return await self.driver.unhealthy(release_id)
