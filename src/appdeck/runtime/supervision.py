"""Running and supervising instances: spawning an instance's shim (in a new session, so it
leads the instance's process group) and restarting it when it exits without being asked to.

Supervision waits for the shim to exit (``pidfd``, or polling ``/proc`` where pidfds are
unavailable) — the same way for instances it spawned and for adopted ones. Replicas on one
host may all supervise an instance; what its exit means is read from its record in
``instances.json`` under the release's lock (see :mod:`.state`): no record is a stop (made
here or by another replica: nothing is restarted), another live process is a restart someone
else made (supervised from then on), the dead process is a crash: the instance is restarted
on the same port after a backoff (see :class:`~.model.RestartPolicy`), by the first
supervisor to take the lock after it; a crash loop marks the release unhealthy and the
instance is given up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Final

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.runtime import netns
from appdeck.runtime import shim as shim_module
from appdeck.runtime.cgroups import Limits, oom_kills
from appdeck.runtime.core import DriverCore
from appdeck.runtime.driver import Release
from appdeck.runtime.logfile import LogWriter
from appdeck.runtime.model import InstanceState, ReleaseState, instance_key
from appdeck.runtime.procs import forget_process, kill_leftovers, pidfd
from appdeck.runtime.sandbox import env_fd, root_env
from appdeck.runtime.shim import is_running, proc_stat
from appdeck.runtime.state import ReleaseRemoved, load_instances, locked, read_json, records

log = logging.getLogger("appdeck.runtime")

SHIM_PATH: Final = Path(shim_module.__file__).resolve()
SHIM_BOOT: Final = (
    "import importlib.util as u,sys\n"
    "s=u.spec_from_file_location('appdeck_shim',sys.argv.pop(1))\n"
    "m=sys.modules['appdeck_shim']=u.module_from_spec(s)\n"
    "s.loader.exec_module(m)\n"
    "sys.exit(m.main(sys.argv[1:]))\n"
)
"""How an instance's shim runs: ``python -I -S -c SHIM_BOOT <SHIM_PATH> <its args>``, loaded
by path like a module, so that its compiled form (``__pycache__``, as the server imported it)
is used; run as a script (``python shim.py``), its 540 lines were compiled at every start
(~36 M instructions, about a quarter of the shim's start-up)."""
STOPPED: Final = "stopped"
FOLLOWED: Final = "followed"
CRASHED: Final = "crashed"
"""What a supervisor finds when its instance's process is gone (see ``_look``)."""
MAX_RECORDED_NETNS: Final = 1024
ENV_FD: Final = 4
"""The shim's descriptor holding its app's env for bubblewrap (3 is its network's)."""
"""Namespace fds kept for instances other replicas started (all closed past it)."""


class SupervisionMixin(DriverCore):
    """Spawning instances and supervising them (restarts, crash loops)."""

    def _spawn(self, state: ReleaseState, instance: InstanceState) -> None:
        """Start the shim of ``instance`` (in a new session) and remember who it is."""
        release = state.release
        assert release is not None
        workspace = state.workspace
        argv = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            SHIM_BOOT,
            str(SHIM_PATH),
            "--log",
            str(state.log("runtime")),
            "--instance",
            str(instance.index),
            "--max-bytes",
            str(self.log_max_bytes),
            "--grace",
            str(self.leftover_grace_s),
            "--cwd",
            str(workspace),
        ]
        command = self._run_argv(release, workspace, instance.port)
        actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
        key = instance_key(state, instance)
        egress = False
        if self.sandbox is not None:
            space = netns.new_loopback_only()  # the instance's network, before it runs
            instance.netns_fd, instance.netns_pid = space, None
            actions.append((os.POSIX_SPAWN_DUP2, space, 3))
            argv += ["--netns-fd", "3", "--memory-mb", str(release.spec.resources.memory_mb)]
            if release.spec.outbound and self.egress is not None:
                self.egress.listen(key, space)  # before the app starts: nothing can take it
                egress = True
            limits = Limits(
                memory_mb=release.spec.resources.memory_mb,
                cpus=release.spec.resources.cpus,
                pids=release.spec.resources.pids,
            )
            if self.sandbox.cgroups is not None:
                group = self.sandbox.cgroups.create(key, limits)
                for procs in group.procs:
                    argv += ["--cgroup-procs", str(procs)]
                if group.oom_events is not None:
                    argv += ["--oom-events", str(group.oom_events)]
                instance.oom_events = group.oom_events
            argv += ["--stage", str(workspace), str(self.sandbox.stage / "app")]
            if state.disk_root is not None:  # on the app's disk: say when it is full
                argv.append("--disk")
            data = self._grant_database(key, space, instance)
            if data is not None:
                argv += ["--stage", str(data), str(self.sandbox.stage / "data")]
            command = self.sandbox.wrap(
                command,
                app_id=release.app_id,
                own_network=False,
                workspace=workspace,
                limits=limits,
                staged=True,
                data=data is not None,
                env_fd=ENV_FD,
                tmp_mb=self._tmp_mb(release),
            )
        argv += ["--", *command]
        env = self._env(
            release, workspace, port=instance.port, egress=egress, database=instance.database
        )
        if self.sandbox is not None:
            # the shim and what it runs before the sandbox are root: the app's env reaches
            # bubblewrap only, in a descriptor (sandbox.env_fd), never a root process
            envs = env_fd(env)
            actions.append((os.POSIX_SPAWN_DUP2, envs, ENV_FD))
            argv[argv.index("--") : argv.index("--")] = ["--env-fd", str(ENV_FD)]
            env = root_env()
        try:
            pid = self._spawn_shim(argv, env, actions, state)
        finally:
            if self.sandbox is not None:
                os.close(envs)
        self._started(instance, pid)

    def _spawn_shim(
        self,
        argv: list[str],
        env: dict[str, str],
        actions: list[tuple[int, ...] | tuple[int, int, str, int, int]],
        state: ReleaseState,
    ) -> int:
        return os.posix_spawn(
            sys.executable,
            argv,
            env,
            file_actions=[
                *actions,
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (
                    os.POSIX_SPAWN_OPEN,
                    2,
                    str(state.directory / "shim.stderr"),
                    os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                    0o600,
                ),
            ],
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            setsigmask=(),
        )

    def _started(self, instance: InstanceState, pid: int) -> None:
        stat = proc_stat(pid)
        instance.pid = pid
        if instance.netns_fd is not None:
            instance.netns_pid = pid  # the shim joins the namespace first thing
        instance.own_child = True
        instance.exit_code = None
        instance.start_ticks = stat.start_ticks if stat else 0
        instance.started_at = self.clock()
        instance.pidfd = pidfd(pid)

    def _grant_database(self, key: str, space: int, instance: InstanceState) -> Path | None:
        """A sandboxed instance's database: the directory to bind at ``/data`` (SQLite), or
        the PostgreSQL front served in its network ``space`` before it starts."""
        grant = instance.database
        if grant is None:
            return None
        if grant.postgres is not None and self.pgfront is not None:
            self.pgfront.listen(key, space, grant.postgres)
        return grant.bind

    def _run_argv(self, release: Release, workspace: Path, port: int) -> list[str]:
        if release.spec.run_command:
            return ["/bin/sh", "-c", release.spec.run_command]
        if release.spec.runtime == "static":
            python = sys.executable if self.sandbox is None else "python3"
            return [python, "-I", "-m", "http.server", str(port), "--bind", "127.0.0.1"]
        if release.spec.runtime == "python":
            for name in ("app.py", "main.py"):
                if (workspace / name).is_file():
                    return ["python", name]
        if release.spec.runtime == "node":
            package = workspace / "package.json"
            if package.is_file() and "start" in _package_scripts(package):
                return ["npm", "start"]
            for name in ("server.js", "index.js"):
                if (workspace / name).is_file():
                    return ["node", name]
        raise FailedPrecondition(
            f"release {release.release_id} has no run command",
            hint="set run_command in the app spec",
        )

    async def _supervise(self, state: ReleaseState, instance: InstanceState) -> None:
        try:
            await self._supervision(state, instance)
        except asyncio.CancelledError:
            raise
        except ReleaseRemoved:  # removed by another server of this host: nothing to do
            log.info("release %s was removed: instance %s", state.release_id, instance.index)
        except Exception:
            log.exception(
                "supervising instance %s of release %s failed", instance.index, state.release_id
            )
            self._writer(state).system(
                f"instance {instance.index} is no longer supervised (internal error)",
                instance=instance.index,
            )

    async def _supervision(self, state: ReleaseState, instance: InstanceState) -> None:
        """Restart ``instance`` whenever its process exits without being asked to: its
        record in ``instances.json`` still names that process (see :mod:`.state`)."""
        writer = self._writer(state)
        policy = self.restart
        while True:
            pid, ticks = instance.pid, instance.start_ticks
            await self._wait_exit(instance)
            if pid is not None:
                # The shim stops the app's leftovers before it exits; if the shim itself was
                # killed, they are still there (holding the port): stop them.
                kill_leftovers(pid, ticks, signal.SIGKILL)
            await self._release_listeners(state, instance)
            if instance.stopping:
                return
            async with locked(state.directory):
                verdict = self._look(state, instance)
                if verdict == CRASHED:
                    self._count_crash(state, instance)
                if verdict == CRASHED and self._crash_loop(state, instance, writer):
                    self._unrecord(state, instance.index, unhealthy=True)
                    await self._remove_group(state, instance)
                    self._tell(state, instance, "given_up")
                    return
            if verdict == STOPPED:
                return
            if verdict == FOLLOWED:
                continue
            delay = instance.backoff_s
            instance.backoff_s = min(delay * 2, policy.max_backoff_s)
            writer.system(
                f"instance {instance.index} exited unexpectedly{instance.how_it_ended()} after "
                f"{self.clock() - instance.started_at:.1f}s; restarting in {delay:g}s "
                f"(crash {len(instance.crashes)} within {policy.window_s:g}s)",
                instance=instance.index,
            )
            await asyncio.sleep(delay)
            if _stop_requested(instance):  # stop() may have run during the backoff
                return
            async with locked(state.directory):
                verdict = self._look(state, instance)
                if verdict == CRASHED:  # still the dead process: restarted here, once
                    await self._remove_group(state, instance)
                    self._restart(state, instance, writer)
            if verdict == STOPPED:
                return
            if verdict == CRASHED:
                self._tell(state, instance, "restarted")

    def _look(self, state: ReleaseState, instance: InstanceState) -> str:
        """What the instance's record says now its process is gone (under the release's
        lock): ``STOPPED`` (no record: a stop, here or on another replica, or a crash loop
        given up), ``FOLLOWED`` (another process runs: supervised from now on) or
        ``CRASHED`` (the record names a dead process)."""
        found, unhealthy = load_instances(state.directory, self._boot_id)
        record = found.get(instance.index)
        if record is None or instance.stopping:
            state.unhealthy = state.unhealthy or unhealthy
            if state.instances.get(instance.index) is instance:
                del state.instances[instance.index]
            return STOPPED
        pid, ticks = int(record["pid"]), int(record["start_ticks"])
        if not is_running(pid, ticks):  # the process that exited (or one that did since)
            return CRASHED
        forget_process(instance)  # the one that exited
        handle = pidfd(pid)
        if handle is not None and not is_running(pid, ticks):
            os.close(handle)  # exited meanwhile: a crash of its own
            return CRASHED
        instance.pid, instance.start_ticks, instance.pidfd = pid, ticks, handle
        instance.port, instance.started_at = int(record["port"]), float(record["started_at"])
        return FOLLOWED

    def _count_crash(self, state: ReleaseState, instance: InstanceState) -> None:
        """Its process crashed: count the OOM kills of its group (before the group goes)
        and tell the watchers."""
        killed = oom_kills(instance.oom_events)
        instance.oom_events = None  # counted: a restart makes a new group
        if instance.exit_code is not None:
            instance.last_code = instance.exit_code
        instance.oom_kills += killed
        self._tell(state, instance, "oom_killed" if killed else "crashed")

    def _crash_loop(self, state: ReleaseState, instance: InstanceState, writer: LogWriter) -> bool:
        """Count the crash; True (the release marked unhealthy, the instance given up) when
        it makes a crash loop."""
        policy = self.restart
        now = self.clock()
        if now - instance.started_at >= policy.reset_after_s:
            instance.backoff_s = policy.initial_backoff_s
        instance.crashes.append(now)
        while instance.crashes and instance.crashes[0] < now - policy.window_s:
            instance.crashes.popleft()
        crashes = len(instance.crashes)
        if crashes <= policy.crash_limit:
            return False
        state.unhealthy = True
        state.instances.pop(instance.index, None)
        state.given_up[instance.index] = instance
        writer.system(
            f"instance {instance.index} crashed {crashes} times within "
            f"{policy.window_s:g}s{instance.how_it_ended()}: crash loop, not restarting; "
            "release marked unhealthy",
            instance=instance.index,
        )
        return True

    def _restart(self, state: ReleaseState, instance: InstanceState, writer: LogWriter) -> None:
        """Spawn the crashed instance again and record its new process (under the lock)."""
        try:
            self._spawn(state, instance)
        except OSError as exc:
            writer.system(
                f"instance {instance.index} could not be restarted: {exc}",
                instance=instance.index,
            )
            instance.pid = None  # its record still names the dead process: tried again
            instance.started_at = self.clock()
            return
        instance.restarts += 1
        self._record_running(state, instance)

    def netns_fd(self, key: str) -> int | None:
        """An fd of the network namespace of the instance ``"<release_id>.<index>"`` (owned
        by the driver: valid until the instance's process changes), or None."""
        release_id, _, index = key.rpartition(".")
        state = self._releases.get(release_id)
        instance = state.instances.get(int(index)) if state and index.isdigit() else None
        if instance is None or instance.pid is None:
            return self._recorded_netns_fd(key, release_id, index)
        if instance.netns_fd is not None and instance.netns_pid == instance.pid:
            return instance.netns_fd
        fd = netns.open_of(instance.pid)
        if fd is None:
            return None
        if not is_running(instance.pid, instance.start_ticks):  # a recycled pid: not ours
            os.close(fd)
            return None
        if instance.netns_fd is not None:
            os.close(instance.netns_fd)
        instance.netns_fd, instance.netns_pid = fd, instance.pid
        return fd

    def _recorded_netns_fd(self, key: str, release_id: str, index: str) -> int | None:
        """The namespace of an instance this process does not supervise: another replica on
        this host started it (replicas share the data dir, so its ``instances.json`` is
        here). Routes are shared, so this replica's ingress serves it too: the pid recorded
        there, while that very process runs (an fd kept per pid, like ``netns_fd``'s)."""
        if not index.isdigit():
            return None
        cached = self._recorded_netns.get(key)
        if cached is not None and is_running(cached[0], cached[1]):
            return cached[2]  # the hot path: no file read while that process runs
        try:
            state = self._existing(release_id)
        except InvalidArgument:
            return None
        if state is None:
            return None
        recorded = read_json(state.directory / "instances.json")
        if recorded.get("boot_id") != self._boot_id:
            return None
        found = [r for r in records(recorded) if int(r["index"]) == int(index)]
        if not found:
            return None
        pid, ticks = int(found[0]["pid"]), int(found[0]["start_ticks"])
        fd = netns.open_of(pid)
        if fd is None:
            return None
        if not is_running(pid, ticks):  # a recycled pid: not that instance
            os.close(fd)
            return None
        if cached is not None:
            os.close(cached[2])
        elif len(self._recorded_netns) >= MAX_RECORDED_NETNS:  # instances long gone, mostly
            for _, _, old in self._recorded_netns.values():
                os.close(old)
            self._recorded_netns.clear()
        self._recorded_netns[key] = (pid, ticks, fd)
        return fd

    async def _wait_exit(self, instance: InstanceState) -> None:
        """Return when the instance's process has exited (reaping it when it is our child)."""
        pid = instance.pid
        if pid is None:
            return
        try:
            if instance.pidfd is not None:
                loop = asyncio.get_running_loop()
                exited: asyncio.Future[None] = loop.create_future()

                def on_exit() -> None:
                    if not exited.done():
                        exited.set_result(None)

                loop.add_reader(instance.pidfd, on_exit)
                try:
                    await exited
                finally:
                    loop.remove_reader(instance.pidfd)
            else:
                while is_running(pid, instance.start_ticks):  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
        finally:
            if not is_running(pid, instance.start_ticks):
                forget_process(instance)


def _stop_requested(instance: InstanceState) -> bool:
    return instance.stopping


def _package_scripts(package: Path) -> dict[str, Any]:
    try:
        scripts = json.loads(package.read_text()).get("scripts")
    except (OSError, ValueError, AttributeError):
        return {}
    return scripts if isinstance(scripts, dict) else {}
