"""Adoption: after a server restart, supervise again the instances that are still running.

``instances.json`` (see :mod:`.state`) names each instance by pid *and* the start time from
``/proc/<pid>/stat`` (and the boot id), so a recycled pid is never mistaken for the instance.
:meth:`AdoptionMixin.adopt` supervises the instances still running and reports the others,
after stopping anything they left behind.
"""

from __future__ import annotations

import asyncio
import os
import signal

from appdeck.platform.runtime.driver import Adoption, InstanceRef, ReleaseSpec
from appdeck.platform.runtime.model import Instance, Release, instance_key, validate
from appdeck.platform.runtime.procs import kill_leftovers, pidfd
from appdeck.platform.runtime.shim import is_running
from appdeck.platform.runtime.state import read_json, read_spec, records
from appdeck.platform.runtime.supervision import SupervisionMixin


class AdoptionMixin(SupervisionMixin):
    """``adopt``: take over the instances a previous server left running."""

    # ---------------------------------------------------------------- adopt

    async def adopt(self, release_id: str, spec: ReleaseSpec | None = None) -> Adoption:
        release = self._existing(release_id)
        if release is None:
            return Adoption(adopted=[], dead=[])  # nothing was ever started here
        async with release.lock:
            if spec is not None:
                validate(spec)
                release.spec = spec  # with its env values, which the disk never holds
            elif release.spec is None:
                release.spec = read_spec(release.directory / "release.json")
            writer = self._writer(release)
            adopted: list[InstanceRef] = []
            dead: list[InstanceRef] = []
            state = read_json(release.directory / "instances.json")
            for record in records(state):
                index = int(record["index"])
                if index in release.instances:
                    adopted.append(release.instances[index].ref(release_id))
                    continue
                instance = Instance(
                    index=index,
                    port=int(record["port"]),
                    pid=int(record["pid"]),
                    start_ticks=int(record["start_ticks"]),
                    started_at=float(record["started_at"]),
                    backoff_s=self.restart.initial_backoff_s,
                    sandboxed=self.sandbox is not None,
                )
                pid = int(record["pid"])
                if state.get("boot_id") == self._boot_id and is_running(pid, instance.start_ticks):
                    instance.pidfd = pidfd(pid)
                    if instance.pidfd is not None and not is_running(pid, instance.start_ticks):
                        os.close(instance.pidfd)  # exited (and maybe reused) while we looked
                        instance.pidfd = None
                    else:
                        release.instances[index] = instance
                        instance.supervisor = asyncio.create_task(
                            self._supervise(release, instance)
                        )
                        writer.system(
                            f"instance {index} (pid {pid}) adopted after a restart",
                            instance=index,
                        )
                        self._serve_egress(release, instance)
                        adopted.append(instance.ref(release_id))
                        continue
                if state.get("boot_id") == self._boot_id:
                    kill_leftovers(pid, instance.start_ticks, signal.SIGKILL)
                writer.system(
                    f"instance {index} (pid {pid}) was not running after a restart",
                    instance=index,
                )
                dead.append(instance.ref(release_id))
            self._save_state(release)
            return Adoption(adopted=adopted, dead=dead)

    def _serve_egress(self, release: Release, instance: Instance) -> None:
        """An adopted instance that may go out gets its proxy again (it died with the old
        server)."""
        spec = release.spec
        if self.egress is None or spec is None or not spec.outbound:
            return
        key = instance_key(release, instance)
        space = self.netns_fd(key)
        if space is not None:
            try:
                self.egress.listen(key, space)
            except OSError as exc:
                self._writer(release).system(
                    f"instance {instance.index}: no outbound network after the restart ({exc})",
                    instance=instance.index,
                )
