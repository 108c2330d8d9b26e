"""Stopping instances: SIGTERM to the shim (which forwards it to its process group), SIGKILL
to the group and every descendant after the grace period; removing a release; and detaching
from running instances when the server shuts down (they keep running, for adoption).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from pathlib import Path

from appdeck.runtime.core import DriverCore
from appdeck.runtime.logfile import LogWriter
from appdeck.runtime.model import InstanceState, ReleaseState
from appdeck.runtime.procs import forget_process, kill_leftovers, process_tree, until_gone
from appdeck.runtime.shim import is_running, signal_quietly
from appdeck.runtime.state import locked
from appdeck.runtime.workspace import remove_tree


class StopMixin(DriverCore):
    """``stop``, ``remove`` and ``detach``."""

    # ---------------------------------------------------------------- stop

    async def stop(self, release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        state = self._existing(release_id)
        if state is None:
            return
        async with state.lock:
            await self._stop(state, index, grace_s)

    async def _stop(self, state: ReleaseState, index: int | None, grace_s: float) -> None:
        """Stop instance ``index`` (None: all) of the release, whichever replica on this host
        supervises it: the records go first (the stop intent every supervisor reads before
        restarting, see :mod:`.state`), then the signals, to the processes they named."""
        mine = [inst for inst in state.instances.values() if index is None or inst.index == index]
        for given_up in [i for i in state.given_up if index is None or i == index]:
            del state.given_up[given_up]  # stopped: no longer a crash loop to report
        for inst in mine:
            inst.stopping = True  # this process's supervisor restarts nothing from now on
        async with locked(state.directory):
            recorded = self._unrecord(state, index)
        targets = list(mine)
        for record in recorded:  # started or restarted by another replica (or an earlier run)
            pid, ticks = int(record["pid"]), int(record["start_ticks"])
            if any(inst.pid == pid for inst in mine) or not is_running(pid, ticks):
                continue
            targets.append(
                InstanceState(
                    index=int(record["index"]),
                    port=int(record["port"]),
                    pid=pid,
                    start_ticks=ticks,
                    started_at=float(record["started_at"]),
                    stopping=True,
                )
            )
        writer = self._writer(state)
        await asyncio.gather(*(self._terminate(inst, grace_s, writer) for inst in targets))
        for inst in targets:
            if state.instances.get(inst.index) is inst:
                del state.instances[inst.index]
            await self._release_group(state, inst)

    async def _terminate(self, instance: InstanceState, grace_s: float, writer: LogWriter) -> None:
        instance.stopping = True
        if instance.supervisor is not None:
            instance.supervisor.cancel()
            await asyncio.gather(instance.supervisor, return_exceptions=True)
            instance.supervisor = None
        pid = instance.pid
        if pid is None or not is_running(pid, instance.start_ticks):
            if pid is not None:
                kill_leftovers(pid, instance.start_ticks, signal.SIGKILL)
                forget_process(instance)
            return
        writer.system(f"stopping instance {instance.index} (pid {pid})", instance=instance.index)
        tree = process_tree(pid)
        signal_quietly(pid, signal.SIGTERM, instance.start_ticks)  # the shim tells its group
        if not await until_gone(pid, instance.start_ticks, tree, within=grace_s, owner=instance):
            writer.system(
                f"instance {instance.index} did not stop within {grace_s:g}s: killed",
                instance=instance.index,
            )
            tree |= process_tree(pid)
            kill_leftovers(pid, instance.start_ticks, signal.SIGKILL)
            for proc in tree.values():
                signal_quietly(proc.pid, signal.SIGKILL, proc.start_ticks)
            await until_gone(pid, instance.start_ticks, tree, within=5.0, owner=instance)
        forget_process(instance)

    async def remove(self, release_id: str) -> None:
        state = self._existing(release_id)
        if state is None:
            return
        async with state.lock:
            await self._stop(state, None, 5.0)
            if state.writer is not None:
                state.writer.close()
            await asyncio.to_thread(remove_release_dir, state.directory)
            if state.disk_root is not None:  # the workspace on the app's disk
                await asyncio.to_thread(remove_tree, state.disk_root)
            self._releases.pop(release_id, None)
            with contextlib.suppress(OSError):
                state.directory.parent.rmdir()  # releases/ of the app, when now empty
                state.directory.parent.parent.rmdir()

    async def remove_app(self, app_id: int) -> None:
        """The app is deleted (after :meth:`remove` of each of its releases): its disk goes
        (:meth:`~.disks.AppDisks.remove`)."""
        if self.disks is not None:
            await asyncio.to_thread(self.disks.remove, app_id)

    async def detach(self) -> None:
        if self._disk_watch is not None:
            self._disk_watch.cancel()
            await asyncio.gather(self._disk_watch, return_exceptions=True)
            self._disk_watch = None
        for state in list(self._releases.values()):
            for instance in state.instances.values():
                if instance.supervisor is not None:
                    instance.supervisor.cancel()
                    await asyncio.gather(instance.supervisor, return_exceptions=True)
                    instance.supervisor = None
                if instance.pidfd is not None:
                    os.close(instance.pidfd)
                    instance.pidfd = None
            if state.writer is not None:
                state.writer.close()
        self._releases.clear()
        if self.egress is not None:  # adopted instances get theirs again from the next server
            await self.egress.close()
        if self.pgfront is not None:  # and their PostgreSQL front too
            await self.pgfront.close()


def remove_release_dir(directory: Path) -> None:
    """Remove a release's directory: renamed away first (atomically), then deleted. Another
    server of this host supervising the release's instances takes its lock and writes its log
    there by path: in the directory being deleted that made files again, and the delete
    failed ("Directory not empty"); under the old name it now finds nothing
    (:class:`~.state.ReleaseRemoved`) and creates nothing."""
    trash = directory.with_name(f".removed-{directory.name}-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.rename(directory, trash)
    except FileNotFoundError:
        return  # removed already (by another server of this host)
    remove_tree(trash)
