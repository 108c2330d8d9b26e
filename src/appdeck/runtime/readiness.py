"""The local driver's readiness: where an instance is reached, the health poll while it
starts, and, when it never passes, why in words (from the kernel's account of its sockets).

Moved in from the deploy engine's old adapter (``platform/deploy/local_runtime.py``) with
its texts byte for byte: they reach agents as a failed rollout's message.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from appdeck.runtime import listening
from appdeck.runtime.driver import Health, InstanceStatus, Readiness, Release
from appdeck.runtime.model import Handle

HEALTH_POLL_S = (0.01, 0.2)
"""Health checks while an instance starts: 10 ms apart at first, each wait
:data:`HEALTH_BACKOFF` times the last, up to 200 ms apart for slow starters. Most apps answer
within 100-300 ms: polled at 0, 10, 22, 36, 54, 74, 99, 129, 165, 208, 260, 322 ms (plus
each check's own time), such an app is seen ready at most ~60 ms late (20 ms growing 1.5x
each time: up to ~100 ms late, per instance, in every rolling step)."""
HEALTH_BACKOFF = 1.2
SANDBOX_PORT = 8000
"""An instance's port when the spec names none: every sandboxed instance has a loopback of
its own, so they may all use the same."""
NO_ANSWER = "no check answered"


class Checked(Protocol):
    """What the poll needs of the local driver."""

    async def check(self, ref: Handle) -> Health: ...
    async def gave_up(self, release_id: str) -> bool: ...
    def inspect(self, release_id: str) -> list[InstanceStatus]: ...


def upstream(ref: Handle) -> str:
    """Where the ingress reaches an instance (see ``ingress.routes.UPSTREAM_HOST``)."""
    address = f"127.0.0.1:{ref.port}"
    return f"{ref.netns}@{address}" if ref.netns else address


async def wait_ready(
    driver: Checked, release: Release, ref: Handle | None, within_s: float
) -> Readiness:
    """Poll the instance's health check (backing off per :data:`HEALTH_POLL_S`) until it
    passes, the release crash-loops, or ``within_s`` ran out; then say why not. ``ref``:
    the instance as the driver supervises it (None: not running here)."""
    last: Health | None = None
    if ref is not None:
        deadline, poll = time.monotonic() + within_s, HEALTH_POLL_S[0]
        while time.monotonic() < deadline:
            health = await driver.check(ref)
            if health.ok:
                return Readiness(True, "")
            last = health
            if await driver.gave_up(ref.release_id):
                break
            await asyncio.sleep(poll)
            poll = min(poll * HEALTH_BACKOFF, HEALTH_POLL_S[1])
    return Readiness(False, await _why(driver, release, ref, last))


async def _why(driver: Checked, release: Release, ref: Handle | None, last: Health | None) -> str:
    if await driver.gave_up(release.release_id):
        exits = [s.last_exit for s in driver.inspect(release.release_id) if s.last_exit]
        ended = f"; it last ended with {exits[0]}" if exits else ""
        return f"the app kept crashing{ended} (the runtime log has its output)"
    if ref is None or ref.pid <= 0:
        return last.detail if last is not None else NO_ANSWER
    if last is not None and last.status is not None:
        return f"{last.detail}: serve {release.spec.health_check.path} or change health_check"
    ports = await asyncio.to_thread(
        listening.listening_ports, ref.pid, own_netns=ref.netns is not None
    )
    return listening.explain(ref.port, ports) or (last.detail if last is not None else NO_ANSWER)
