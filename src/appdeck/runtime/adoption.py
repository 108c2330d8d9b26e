"""Adoption: after a server restart, supervise again the instances that are still running.

``instances.json`` (see :mod:`.state`) names each instance by pid *and* the start time from
``/proc/<pid>/stat`` (and the boot id), so a recycled pid is never mistaken for the instance;
and the process must be a shim of *this* data dir (its command line names the release's log
here): a copy of a data dir, or another install's records, never adopt nor kill another
install's instances.
:meth:`AdoptionMixin.take_over` supervises the instances still running and reports the others,
after stopping anything they left behind.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from dataclasses import dataclass

from appdeck.runtime.driver import Release
from appdeck.runtime.inspection import recall
from appdeck.runtime.model import Handle, InstanceState, ReleaseState, instance_key, validate
from appdeck.runtime.procs import kill_leftovers, pidfd
from appdeck.runtime.shim import is_running
from appdeck.runtime.state import read_json, read_spec, records
from appdeck.runtime.supervision import SupervisionMixin


@dataclass(frozen=True, slots=True)
class TakenOver:
    """What :meth:`AdoptionMixin.take_over` found of a release's recorded instances (the
    driver's handles; :meth:`~appdeck.runtime.local.LocalDriver.recover` answers the seam's
    :class:`~appdeck.runtime.driver.Adoption` from it)."""

    adopted: list[Handle]
    """Still running: supervised again, as if this driver had started them."""
    dead: list[Handle]
    """Gone while nobody watched (their leftovers were stopped): the caller starts them
    again."""


class AdoptionMixin(SupervisionMixin):
    """``take_over``: supervise the instances a previous server left running."""

    # ---------------------------------------------------------------- take over

    async def take_over(self, release_id: str, release: Release | None = None) -> TakenOver:
        """After a server restart: take over the release's instances that still run, report
        the others. Idempotent; a release never started here takes over nothing.
        ``release`` is what restarts of the adopted instances run with: pass it (the driver
        keeps no env values on disk; without it, restarts get the env's names with empty
        values)."""
        state = self._existing(release_id)
        if state is None:
            return TakenOver(adopted=[], dead=[])  # nothing was ever started here
        async with state.lock:
            if release is not None:
                validate(release)
                state.release = release  # with its env values, which the disk never holds
            elif state.release is None:
                state.release = read_spec(state.directory / "release.json")
            writer = self._writer(state)
            adopted: list[Handle] = []
            dead: list[Handle] = []
            recorded = read_json(state.directory / "instances.json")
            state.unhealthy = state.unhealthy or bool(recorded.get("unhealthy", False))
            for record in records(recorded):
                index = int(record["index"])
                if index in state.instances:
                    adopted.append(state.instances[index].handle(release_id))
                    continue
                instance = InstanceState(
                    index=index,
                    port=int(record["port"]),
                    pid=int(record["pid"]),
                    start_ticks=int(record["start_ticks"]),
                    started_at=float(record["started_at"]),
                    backoff_s=self.restart.initial_backoff_s,
                    sandboxed=self.sandbox is not None,
                )
                groups = self.sandbox.cgroups if self.sandbox is not None else None
                key = instance_key(state, instance)
                recall(instance, record, groups.oom_events(key) if groups else None)
                pid = int(record["pid"])
                this_boot = recorded.get("boot_id") == self._boot_id
                if this_boot and not _shim_of(pid, state):
                    writer.system(
                        f"instance {index} (pid {pid}) is not this server's: left alone",
                        instance=index,
                    )
                    dead.append(instance.handle(release_id))
                    continue
                if this_boot and is_running(pid, instance.start_ticks):
                    instance.pidfd = pidfd(pid)
                    if instance.pidfd is not None and not is_running(pid, instance.start_ticks):
                        os.close(instance.pidfd)  # exited (and maybe reused) while we looked
                        instance.pidfd = None
                    else:
                        state.instances[index] = instance
                        instance.supervisor = asyncio.create_task(self._supervise(state, instance))
                        writer.system(
                            f"instance {index} (pid {pid}) adopted after a restart",
                            instance=index,
                        )
                        self._serve_egress(state, instance)
                        await self._serve_database(state, instance)
                        adopted.append(instance.handle(release_id))
                        continue
                if this_boot:
                    kill_leftovers(pid, instance.start_ticks, signal.SIGKILL)
                writer.system(
                    f"instance {index} (pid {pid}) was not running after a restart",
                    instance=index,
                )
                dead.append(instance.handle(release_id))
            # Nothing written: a dead instance's record stays until it is started again (a
            # supervisor elsewhere may be about to restart it, which needs the record).
            return TakenOver(adopted=adopted, dead=dead)

    def _serve_egress(self, state: ReleaseState, instance: InstanceState) -> None:
        """An adopted instance that may go out gets its proxy again (it died with the old
        server)."""
        release = state.release
        if self.egress is None or release is None or not release.spec.outbound:
            return
        key = instance_key(state, instance)
        space = self.netns_fd(key)
        if space is not None:
            try:
                self.egress.listen(key, space)
            except OSError as exc:
                self._writer(state).system(
                    f"instance {instance.index}: no outbound network after the restart ({exc})",
                    instance=instance.index,
                )

    async def _serve_database(self, state: ReleaseState, instance: InstanceState) -> None:
        """An adopted instance gets its PostgreSQL front again (it died with the old
        server); a SQLite directory stays bound in the instance's own mount namespace."""
        release = state.release
        if release is None or self.pgfront is None or self.sandbox is None:
            return
        key = instance_key(state, instance)
        try:
            instance.database = await self._database_grant(release)
            space = self.netns_fd(key)
            grant = instance.database
            if grant is not None and grant.postgres is not None and space is not None:
                self.pgfront.listen(key, space, grant.postgres)
        except Exception as exc:  # noqa: BLE001 - the instance runs on; its log says why
            self._writer(state).system(
                f"instance {instance.index}: no database after the restart ({exc})",
                instance=instance.index,
            )


def _shim_of(pid: int, state: ReleaseState) -> bool:
    """Whether ``pid`` is (or, gone, may have been) an instance shim of ``state``'s release in
    this data dir: its command line names the release's runtime log (``--log <path>``). A
    live process whose command line says otherwise is someone else's."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return True  # gone: nothing of anyone's to adopt, its group may still need stopping
    if not argv or argv == [b""]:
        return True  # a zombie, or gone meanwhile
    wanted = os.fsencode(str(state.log("runtime")))
    return any(a == b"--log" and b == wanted for a, b in itertools.pairwise(argv))
