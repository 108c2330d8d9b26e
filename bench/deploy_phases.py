"""Where a deploy's time goes (issue 26 §4): ``bench/deploy.py``'s platform (in-process, as
``appdeck serve`` runs it, sandboxed by default), with the pieces on a deploy's path timed.

    .venv/bin/python bench/deploy_phases.py [--rounds 3] [--sandbox on|off]

Each round deploys hello (2 instances) rolling, then blue/green, then rolls back to the warm
release; every deploy replaces a live one. Printed per run: the wall time, and the time spent
inside each timed piece with its call count, summed over the run (pieces overlap: the route
publish waits for HAProxy, a start hook's reload runs beside a health check). The pieces:
the local driver (``prepare``: the source copy and the build; ``_sandboxed_copy``, and
``_run_step``: each build step in its sandbox; ``start``; ``wait_ready``: the health poll;
``stop``), the route publish (``HAProxyRouter.published``, and what it waits for: HAProxy's
config check, reload and runtime API), the deployment records, and the change feed (every
``deployment.updated``'s listeners, resource notifications among them).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

import deploy

from appdeck import runtime_setup
from appdeck.ingress.haproxy.plane import HAProxyDataPlane
from appdeck.ingress.haproxy.process import HAProxyProcess
from appdeck.ingress.haproxy.runtime_api import RuntimeApi
from appdeck.platform.changes import ChangeFeed
from appdeck.runtime.build import BuildMixin
from appdeck.runtime.local import LocalDriver
from appdeck.storage.deployments import DeploymentStore

TIMED: list[tuple[type, list[str]]] = [
    (LocalDriver, ["prepare", "start", "wait_ready", "stop"]),
    (BuildMixin, ["_sandboxed_copy", "_run_step"]),
    (runtime_setup.HAProxyRouter, ["published"]),
    (HAProxyDataPlane, ["_sync"]),
    (HAProxyProcess, ["check", "apply", "wait_for"]),
    (RuntimeApi, ["raw"]),
    (DeploymentStore, ["create", "get", "update", "for_app"]),
    (ChangeFeed, ["emit"]),
]


class Clock:
    """Time spent in each wrapped coroutine method while :attr:`on`."""

    def __init__(self) -> None:
        self.on = False
        self.total: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()

    def wrap(self, cls: type, name: str) -> None:
        original: Callable[..., Awaitable[Any]] = getattr(cls, name)
        label = f"{cls.__name__}.{name}"

        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            begin = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                if self.on:
                    self.total[label] += time.perf_counter() - begin
                    self.calls[label] += 1

        setattr(cls, name, timed)

    def start(self) -> None:
        self.total.clear()
        self.calls.clear()
        self.on = True

    def report(self, what: str, elapsed: float) -> None:
        self.on = False
        print(f"--- {what}: {elapsed * 1000:.0f} ms")
        for label, seconds in sorted(self.total.items(), key=lambda kv: -kv[1]):
            print(f"    {label:32s} {seconds * 1000:8.1f} ms  x{self.calls[label]}")


async def main(mode: str, rounds: int) -> None:
    clock = Clock()
    for cls, names in TIMED:
        for name in names:
            clock.wrap(cls, name)
    deploy.use_system_python()
    platform = await deploy._open(mode)
    try:
        for _ in range(rounds):
            for strategy in ("rolling", "blue_green"):
                clock.start()
                clock.report(strategy, await deploy._deploy(platform, strategy))
            clock.start()
            begin = time.perf_counter()
            services = platform.services.platform
            assert services is not None
            app = (await services.apps.load(platform.who, platform.app_id, "deploy.write")).app
            await services.deploys.rollback(app)
            clock.report("warm rollback", time.perf_counter() - begin)
            await deploy._deploy(platform, "rolling")  # live again on a fresh release
    finally:
        await platform.services.stop(stop_apps=True)
        shutil.rmtree(platform.work, ignore_errors=True)  # its data dir holds a uid slot


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sandbox", choices=["on", "off"], default="on")
    args = parser.parse_args()
    asyncio.run(main(args.sandbox, args.rounds))
