"""The local runtime driver: every release a workspace, every instance a supervised process
group on this machine.

Layout under ``runtime_dir``::

    apps/<app_id>/releases/<release_id>/
        src/              the workspace: a copy of the source, built in place (.venv, ...)
        release.json      the spec of the last start (0600: it holds the app's env), for adoption
        built.json        the spec of the last successful build (prepare is idempotent)
        instances.json    the instances that should be running: pid, pgid, port, start ticks
        .state.lock       flock held while instances.json is read and changed (every replica)
        build.log         JSON lines (+ .1 when rotated, + .seq: the lock and next seq)
        runtime.log       JSON lines written by the instances' shims and by this driver
        shim.stderr       the shims' own failures (normally empty)

An instance is ``python -I -S -c <boot> shim.py ... -- /bin/sh -c <run command>`` started in a new
session: the shim (see :mod:`appdeck.runtime.shim`) leads the process group, owns
the app's stdout/stderr and writes them to ``runtime.log`` itself, so an instance needs
nothing from the server to keep running and logging.

Supervision: the driver waits for the shim to exit (``pidfd``, or polling ``/proc`` where
pidfds are unavailable) — the same way for instances it spawned and for adopted ones. An exit
not asked for by :meth:`stop` (on any replica of this host: a stop removes the instance's
record from ``instances.json`` before it signals, see :mod:`.state`) is a crash: the instance
is restarted on the same port after a backoff (0.5 s doubling to 10 s, reset after a long
enough run), once, by whichever supervisor takes the release's lock first; more than 5 crashes
within 60 s mark the release unhealthy and the instance is given up.

Adoption: ``instances.json`` names each instance by pid *and* the start time from
``/proc/<pid>/stat`` (and the boot id), so a recycled pid is never mistaken for the instance.
:meth:`LocalDriver.recover` supervises the instances still running and reports the others,
after stopping anything they left behind.

The driver is assembled here from mixins, one module per concern: :mod:`.core` (settings,
bookkeeping, environment), :mod:`.build`, :mod:`.supervision` (spawning and restarts),
:mod:`.stopping`, :mod:`.adoption` and :mod:`.export` (a built workspace as a tar); with
:mod:`.model` (releases, instances, restart policy, validation), :mod:`.state` (the state
files) and :mod:`.procs` (process helpers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time

from appdeck.common.errors import Conflict, FailedPrecondition, InvalidArgument
from appdeck.common.unwinding import to_the_end
from appdeck.runtime import netns
from appdeck.runtime.adoption import AdoptionMixin, TakenOver
from appdeck.runtime.build import LOG_TAIL_LINES, BuildMixin
from appdeck.runtime.core import BUILD_ENV_PREFIXES, PASSED_ENV
from appdeck.runtime.disks import MIB, split
from appdeck.runtime.driver import (
    Adoption,
    Capabilities,
    Health,
    Instance,
    LogKind,
    LogPage,
    Readiness,
    Release,
)
from appdeck.runtime.export import ExportMixin
from appdeck.runtime.inspection import InspectionMixin
from appdeck.runtime.logs import last_seq, read_page
from appdeck.runtime.model import (
    ENV_NAME,
    MAX_INDEX,
    RELEASE_ID,
    Handle,
    InstanceState,
    ReleaseState,
    RestartPolicy,
    check_health_path,
    check_log_args,
    validate,
)
from appdeck.runtime.procs import free_port
from appdeck.runtime.readiness import SANDBOX_PORT, upstream, wait_ready
from appdeck.runtime.state import load_stops, locked, read_json, stop_mark, write_json
from appdeck.runtime.stopping import StopMixin
from appdeck.runtime.supervision import SHIM_PATH
from appdeck.runtime.workspace import CopyLimits

log = logging.getLogger("appdeck.runtime")

__all__ = [
    "BUILD_ENV_PREFIXES",
    "ENV_NAME",
    "LOG_TAIL_LINES",
    "MAX_INDEX",
    "PASSED_ENV",
    "RELEASE_ID",
    "SHIM_PATH",
    "CopyLimits",
    "LocalDriver",
    "RestartPolicy",
    "free_port",
]


class LocalDriver(BuildMixin, AdoptionMixin, StopMixin, InspectionMixin, ExportMixin):
    """:class:`~appdeck.runtime.driver.Driver` on local processes.

    Besides the seam, members for this driver's own tests, benchmarks and the composition
    root only, on its :class:`~.model.Handle` (a pid and a port): :meth:`launch` (on a port
    the caller picks), :meth:`check` (one health check), :meth:`handles`, :meth:`take_over`, and
    ``netns_fd`` (the data plane's namespaces: the composition root hands it to HAProxy).
    Whether apps are sandboxed is ``capabilities().own_network``."""

    # ---------------------------------------------------------------- the driver seam

    def capabilities(self) -> Capabilities:
        sandboxed = self.sandbox is not None
        return Capabilities(
            own_network=sandboxed,
            namespaced_upstreams=sandboxed,
            host_processes=True,
            in_place_restart=True,
            indexed_instances=True,
            driver_grep=True,
            app_disks=self.disks is not None and self.disks.kernel,
        )

    async def start(self, release: Release, index: int) -> Instance:
        """Start instance ``index`` on a port this driver picks: sandboxed, the spec's (or
        :data:`~.readiness.SANDBOX_PORT`) inside the instance's own network namespace;
        unsandboxed, a free one, never a port the app names (it could be the control
        plane's)."""
        port = (release.spec.port or SANDBOX_PORT) if self.sandbox is not None else free_port()
        instance = _instance(await self.launch(release, index, port))
        for hook in list(self.started):
            try:
                hook(release, instance)
            except Exception:  # a hook's failure must not fail the start
                log.exception("instance start hook failed")
        return instance

    async def wait_ready(self, release: Release, instance: Instance, within_s: float) -> Readiness:
        state = self._releases.get(instance.release_id)
        found = state.instances.get(instance.index) if state is not None else None
        handle = found.handle(instance.release_id) if found is not None else None
        return await wait_ready(self, release, handle, within_s)

    async def gave_up(self, release_id: str) -> bool:
        state = self._existing(release_id)
        return state is not None and state.unhealthy

    async def running(self, release_id: str) -> list[Instance]:
        return [_instance(handle) for handle in await self.handles(release_id)]

    async def recover(self, release: Release) -> Adoption:
        found = await self.take_over(release.release_id, release)
        return Adoption([_instance(h) for h in found.adopted], [h.index for h in found.dead])

    # ---------------------------------------------------------------- run

    async def launch(self, release: Release, index: int, port: int) -> Handle:
        """Start instance ``index`` on ``port`` (the caller's choice: tests and benchmarks;
        the platform calls :meth:`start`)."""
        validate(release)
        if not 0 <= index <= MAX_INDEX:
            raise InvalidArgument(f"instance index must be 0..{MAX_INDEX}, not {index}")
        if not 1 <= port <= 65535:
            raise InvalidArgument(f"port must be 1..65535, not {port}")
        if self.disks is not None:  # mounted (a no-op unless the host rebooted)
            idle = self._app_idle(release.app_id)
            await asyncio.to_thread(self.disks.ensure, release.app_id, resize=False, migrate=idle)
        state = self._existing(release.release_id)
        if state is None or not state.workspace.is_dir():
            raise FailedPrecondition(
                f"release {release.release_id} has no workspace",
                hint="prepare the release before starting it",
            )
        async with state.lock:
            if index in state.instances:
                raise Conflict(
                    f"instance {index} of release {release.release_id} is already running"
                )
            state.release = release
            if read_json(state.directory / "release.json") != self._record(release):
                # What restarts (and a later adoption) will run: the spec of the last start.
                write_json(state.directory / "release.json", self._record(release))
            instance = InstanceState(
                index=index,
                port=port,
                backoff_s=self.restart.initial_backoff_s,
                sandboxed=self.sandbox is not None,
            )
            instance.database = await self._database_grant(release)
            # The host's lock is held to read and to record, not across the spawn (see
            # .state): a server stopped mid-spawn must not hold every replica's stop.
            async with locked(state.directory):  # one record per index, whoever starts it
                self._check_unrecorded(state, index)
                mark = stop_mark(load_stops(state.directory), index)
            state.instances[index] = instance
            state.given_up.pop(index, None)
            try:
                self._spawn(state, instance)
            except BaseException:
                del state.instances[index]
                raise
            try:
                async with locked(state.directory):
                    self._check_unrecorded(state, index)
                    if stop_mark(load_stops(state.directory), index) != mark:
                        raise Conflict(
                            f"instance {index} of release {release.release_id} was stopped "
                            "while it started (by another server on this host)"
                        )
                    self._record_running(state, instance)
            except BaseException:
                await to_the_end(self._abandon(state, instance))
                raise
            instance.supervisor = asyncio.create_task(self._supervise(state, instance))
        self._start_disk_watch()
        return instance.handle(state.release_id)

    def _check_unrecorded(self, state: ReleaseState, index: int) -> None:
        """Conflict when a live process is recorded as instance ``index`` (under the lock)."""
        if any(r["index"] == index for r in self._recorded_alive(state)):
            raise Conflict(
                f"instance {index} of release {state.release_id} runs unsupervised "
                "here (another server on this host started it)",
                hint="adopt the release, or stop it",
            )

    async def _abandon(self, state: ReleaseState, instance: InstanceState) -> None:
        """Stop an instance spawned and never recorded (its start lost to a stop or to
        another server's start meanwhile): its process group killed, its resources let go."""
        instance.stopping = True
        writer = self._writer(state)
        writer.system(
            f"instance {instance.index} is stopped as it starts: another server on this host "
            "stopped it, or started it, meanwhile",
            instance=instance.index,
        )
        await self._terminate(instance, 0.5, writer)
        if state.instances.get(instance.index) is instance:
            del state.instances[instance.index]
        await self._release_group(state, instance)

    async def take_over(self, release_id: str, release: Release | None = None) -> TakenOver:
        found = await super().take_over(release_id, release)
        if found.adopted:
            self._start_disk_watch()
        return found

    # ---------------------------------------------------------------- disk accounting

    def _start_disk_watch(self) -> None:
        if self.disks is not None and self.disks.mode == "account" and self._disk_watch is None:
            self._disk_watch = asyncio.create_task(self._watch_disks(), name="disk-accounting")

    async def _watch_disks(self) -> None:
        """``account`` mode (:mod:`.disks`): measure the running apps every
        ``disk_check_s``; stop those over their limit."""
        while True:
            await asyncio.sleep(self.disk_check_s)
            try:
                await self.check_disks()
            except Exception:
                log.exception("measuring the apps' disks failed")

    async def check_disks(self) -> list[int]:
        """Stop every running app whose workspaces and database directory hold more than its
        disk's share (``account`` mode), saying so in its log; the apps stopped."""
        disks = self.disks
        if disks is None or disks.mode != "account":
            return []
        running: dict[int, list[ReleaseState]] = {}
        for state in list(self._releases.values()):
            if state.release is not None and state.instances:
                running.setdefault(state.release.app_id, []).append(state)
        stopped = []
        for app_id, states in running.items():
            release = states[0].release
            assert release is not None
            limit_mb = split(self._disk_mb(release)).image_mb
            paths = list(self.runtime_dir.glob(f"apps/{app_id}/releases/[!.]*/src"))
            if disks.appdb is not None:
                paths.append(disks.appdb / str(app_id))
            used = await asyncio.to_thread(disks.usage, paths)
            self._disk_used[app_id] = used
            if used <= limit_mb * MIB:
                continue
            for state in states:
                self._writer(state).system(
                    f"the app's disk is full: its workspaces and database use "
                    f"{used // MIB} MiB, over its {limit_mb} MiB (spec.resources.disk_mb, "
                    "APPDECK_APP_DISK_MB): stopping its instances"
                )
                await self.stop(state.release_id)
            stopped.append(app_id)
        return stopped

    # ---------------------------------------------------------------- observe

    async def check(
        self, ref: Handle, *, path: str | None = None, timeout_s: float | None = None
    ) -> Health:
        """GET the release's health path (or ``path``) on the instance's port, once."""
        state = self._releases.get(ref.release_id)
        release = state.release if state is not None else None
        path = path or (release.spec.health_check.path if release else "/")
        timeout = timeout_s or (release.spec.health_check.timeout_s if release else 5.0)
        check_health_path(path)
        started = time.perf_counter()

        def elapsed() -> float:
            return round((time.perf_counter() - started) * 1000, 2)

        try:
            async with asyncio.timeout(timeout):
                sock = None
                if ref.netns is not None:
                    fd = self.netns_fd(ref.netns)
                    if fd is None:
                        return Health(False, "the instance has no network yet", None, elapsed())
                    sock = netns.socket_in(fd)
                status = await _http_status("127.0.0.1", ref.port, path, sock)
        except TimeoutError:
            return Health(False, f"GET {path} timed out after {timeout:g}s", None, elapsed())
        except ConnectionRefusedError:
            detail = f"nothing listening on $PORT={ref.port} (connection refused)"
            return Health(False, detail, None, elapsed())
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return Health(False, f"GET {path} failed: {reason}", None, elapsed())
        ok = 200 <= status < 400
        return Health(ok, f"GET {path} answered {status}", status, elapsed())

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage:
        log = self._log_path(release_id, kind)
        check_log_args(cursor, limit, grep)
        return await asyncio.to_thread(read_page, log, cursor, limit, grep)

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage:
        log = self._log_path(release_id, kind)
        check_log_args(cursor, limit, grep)
        position = last_seq(log) if cursor is None else cursor
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            page = await asyncio.to_thread(read_page, log, position, limit, grep)
            if page.lines or time.monotonic() >= deadline:
                return page
            position = page.next_cursor
            while last_seq(log) <= position and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.02)  # let the writer finish the line it numbered

    async def handles(self, release_id: str) -> list[Handle]:
        """The release's instances that have a running process now, by index."""
        state = self._releases.get(release_id)
        if state is None:
            return []
        return [
            inst.handle(release_id)
            for _, inst in sorted(state.instances.items())
            if inst.pid is not None
        ]

    async def releases(self) -> list[str]:
        found = {  # not a release being removed (renamed ".removed-...")
            path.name
            for path in self.runtime_dir.glob("apps/*/releases/*")
            if path.is_dir() and not path.name.startswith(".")
        }
        return sorted(found | set(self._releases))


# -------------------------------------------------------------------- helpers


def _instance(handle: Handle) -> Instance:
    return Instance(handle.release_id, handle.index, upstream(handle), handle.started_at)


async def _http_status(host: str, port: int, path: str, sock: socket.socket | None) -> int:
    if sock is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
        except BaseException:
            sock.close()
            raise
        reader, writer = await asyncio.open_connection(sock=sock)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: appdeck-health\r\n"
            "Accept: */*\r\nConnection: close\r\n\r\n".encode("ascii")
        )
        await writer.drain()
        status_line = await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ValueError("not an HTTP answer")
    return int(parts[1])
