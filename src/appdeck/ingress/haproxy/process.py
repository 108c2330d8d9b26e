"""The HAProxy process: started in master-worker mode as a daemon (its own session, so it
outlives ``appdeck serve`` like the app shims), adopted by the next start, reloaded through
its master socket, stopped on request.

One data plane per host and install: every replica on the host drives the same process, and
each change (write the files, start or reload, set weights) happens under the data plane's
lease (:mod:`.lease`: ``<dir>/lease``, taken over from a holder stopped past its end).

A process is ours when its pid file names a live process whose command line is HAProxy with
our config file. Which configuration the worker runs is read back, not assumed: the config's
``description`` carries a digest of it (:attr:`Rendered.marker`) and ``show info`` answers it.

A reload is not preceded by ``haproxy -c``: the master parses the new config itself and, when
it refuses it, keeps the running worker and counts the failure (``show proc``'s ``[failed:
N]``), which the reload watches for. The check (20-30 ms of CPU, a process start, on every
change of the data plane) runs only to say why a config was refused, and before every reload
of an HAProxy whose ``show proc`` does not count failures so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Final

from appdeck.ingress.haproxy.config import Layout, Rendered
from appdeck.ingress.haproxy.lease import Held, LeaseBusy, LeaseLost, PlaneLease
from appdeck.ingress.haproxy.runtime_api import RuntimeApi, RuntimeApiError

log = logging.getLogger("appdeck.ingress.haproxy")

BINARY: Final = Path("/usr/sbin/haproxy")
READY_WITHIN_S: Final = 10.0
"""A start or reload is in effect within this (the worker parses the config and binds)."""
STOP_WITHIN_S: Final = 5.0
RETAKES: Final = 3
"""How often one reload takes a newer config after the first (:meth:`HAProxyProcess.apply`): a
bound, so that changes coming one after another never hold a reload back."""
_MASTER_LINE: Final = re.compile(r"^\s*\d+\s+master\s+(\d+)\s+\[failed:\s*(\d+)\]", re.MULTILINE)


class HAProxyFailed(RuntimeError):
    """HAProxy refused the configuration or did not come up; one line, no paths."""


class HAProxyProcess:
    def __init__(self, layout: Layout, *, binary: Path = BINARY) -> None:
        self.layout = layout
        self.binary = binary
        # the module's bound (a loaded machine): 5 s failed a start at load 14 (issue 20)
        self.stats = RuntimeApi(layout.stats)
        self.master = RuntimeApi(layout.master, master=True)
        self.lease = PlaneLease(layout.lease)
        self._held: Held | None = None
        self._local = asyncio.Lock()

    # -- what runs ------------------------------------------------------------------------

    def master_pid(self) -> int | None:
        """The master's pid when it runs and is ours (our binary, our config file)."""
        try:
            pid = int(self.layout.pid.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError, IndexError):
            return None
        if stat.rpartition(")")[2].split()[:1] == ["Z"]:
            return None
        if str(self.layout.config).encode() not in cmdline or b"-W" not in cmdline:
            return None
        return pid

    def running(self) -> bool:
        return self.master_pid() is not None

    async def marker(self) -> str | None:
        """The ``description`` of the worker answering the stats socket (None: none does)."""
        try:
            return description(await self.stats.command("show info"))
        except RuntimeApiError:
            return None

    # -- changes --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """Hold the host's lease on this data plane (:mod:`.lease`: a bounded wait, and a
        holder stopped midway is taken over); changes made under it check it first
        (:meth:`check_held`)."""
        self.layout.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            # one holder name per process: its own holds are serialized here
            async with self._local, self.lease.hold() as held:
                self._held = held
                try:
                    yield
                finally:
                    self._held = None
        except LeaseBusy:
            raise HAProxyFailed("another process holds the data plane's lease") from None

    def check_held(self) -> None:
        """:class:`HAProxyFailed` when this process's lease was taken over (it was stopped
        past its end): another replica changes HAProxy now, this one must not."""
        if self._held is not None:
            try:
                self._held.check()
            except LeaseLost as exc:
                raise HAProxyFailed(str(exc)) from None

    def write(self, rendered: Rendered, *, config_only: bool = False) -> None:
        """Write the config and its maps (each atomically: a restart reads whole files).
        ``config_only``: the maps are the ones written last (a change of weights alone: its
        config fits the running one, maps included)."""
        self.layout.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        files = {} if config_only else rendered.files
        for name, text in [*files.items(), (self.layout.config.name, rendered.config)]:
            path = self.layout.file(name)
            temporary = path.with_name(f".{name}.new")
            temporary.write_text(text)
            os.replace(temporary, path)

    async def apply(
        self,
        rendered: Rendered,
        *,
        newer: Callable[[Rendered], Awaitable[Rendered | None]] | None = None,
    ) -> str:
        """Make HAProxy run ``rendered`` (call under :meth:`locked`): ``"unchanged"`` when it
        already does, else ``"reloaded"`` or ``"started"``, once the worker answers with it.

        ``newer`` is asked, with the config just written, for one to take instead (what it
        wants changed meanwhile: the next instance of a set started a moment later); that one
        is written in turn, at most :data:`RETAKES` times, and one reload takes both."""
        if self.running() and await self.marker() == rendered.marker:
            self.check_held()
            self.write(rendered)  # weights may differ: a later reload restores these
            return "unchanged"
        for turn in range(RETAKES + 1):
            self.check_held()
            self.write(rendered)
            instead = await newer(rendered) if newer is not None and turn < RETAKES else None
            if instead is None:
                break
            rendered = instead
        self.check_held()
        if self.running():
            await self.reload(rendered.marker)
            return "reloaded"
        await self.start(rendered.marker)
        return "started"

    async def reload(self, marker: str) -> None:
        """Reload through the master socket and wait for the worker running ``marker``;
        :class:`HAProxyFailed` as soon as the master says it refused the config (the
        running worker goes on serving the previous one), with the reason logged."""
        reloads = master_reloads(await self.master.raw("show proc"))
        if reloads is None:  # a master that does not count failed reloads: check first
            await self.check()
        await self.master.raw("reload")
        await self.wait_for(marker, reloads=None if reloads is None else reloads[0])

    async def _refused_since(self, reloads: int) -> bool:
        """Whether the master answers that a reload after its ``reloads``-th one failed
        (False while it re-executes itself and answers nothing)."""
        try:
            counted = master_reloads(await self.master.raw("show proc"))
        except RuntimeApiError:
            return False
        return counted is not None and counted[0] > reloads and counted[1] > 0

    async def _refused(self) -> HAProxyFailed:
        """The error for a config the master refused at a reload, its reason logged: what
        ``haproxy -c`` says of it, else (a config that parses but does not start: a port
        another process holds) what the master kept of its start, where it keeps it
        (``show startup-logs``, HAProxy 2.7 and later)."""
        try:
            await self.check()
        except HAProxyFailed as exc:
            return exc
        why = "haproxy -c accepts it: a listener that could not bind?"
        with contextlib.suppress(RuntimeApiError):
            why = (await self.master.command("show startup-logs")).strip()[-2000:] or why
        log.error("HAProxy refused its config at a reload: %s", why)
        return HAProxyFailed("HAProxy refused the rendered configuration")

    async def check(self) -> None:
        """``haproxy -c`` on the written config: :class:`HAProxyFailed`, the reason logged,
        when HAProxy refuses it (why a reload failed; before every reload of a master that
        does not count failed reloads)."""
        # one process, no children, killed with its pipes on a cancel (below): asyncio's own
        proc = await asyncio.create_subprocess_exec(  # noqa: TID251
            str(self.binary),
            "-c",
            "-f",
            str(self.layout.config),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(READY_WITHIN_S):
                out, _ = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise HAProxyFailed("checking the HAProxy config took too long") from None
        except asyncio.CancelledError:  # the plane stopping: leave no check running
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        if proc.returncode != 0:
            log.error("HAProxy refused its config: %s", out.decode(errors="replace")[-2000:])
            raise HAProxyFailed("HAProxy refused the rendered configuration")

    async def start(self, marker: str) -> None:
        """Start the master (it daemonizes: a session of its own) and wait for its worker."""
        for stale in (self.layout.master, self.layout.stats):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        log_path = self.layout.file("haproxy.log")
        with log_path.open("ab") as output:  # a file, not a pipe: the daemon keeps its fds
            # the master daemonizes (it must outlive this process and its group): no group kill
            proc = await asyncio.create_subprocess_exec(  # noqa: TID251
                str(self.binary),
                "-W",
                "-D",
                "-S",
                f"{self.layout.master},mode,600",
                "-f",
                str(self.layout.config),
                "-p",
                str(self.layout.pid),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
        try:
            async with asyncio.timeout(READY_WITHIN_S):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise HAProxyFailed("HAProxy did not start in time") from None
        if proc.returncode != 0:
            with contextlib.suppress(OSError):
                log.error("HAProxy did not start: %s", log_path.read_text()[-2000:])
            raise HAProxyFailed("HAProxy did not start")
        await self.wait_for(marker)

    async def wait_for(self, marker: str, *, reloads: int | None = None) -> None:
        """Until the worker answering the stats socket runs the config ``marker`` names, and
        the master answers again (it re-executes itself on a reload and listens on its
        socket a moment after the new worker does: the next reload needs it).
        ``reloads``: the master's count before the reload waited for, whose failure
        :class:`HAProxyFailed` reports at once."""
        deadline = time.monotonic() + READY_WITHIN_S
        while await self.marker() != marker:
            if reloads is not None and await self._refused_since(reloads):
                raise await self._refused()
            if time.monotonic() > deadline:
                raise HAProxyFailed("HAProxy's worker did not take the new configuration")
            await asyncio.sleep(0.01)
        while True:
            try:
                await self.master.command("show proc")
                return
            except RuntimeApiError:
                if time.monotonic() > deadline:
                    raise HAProxyFailed("HAProxy's master socket does not answer") from None
                await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop HAProxy (master and workers) and wait for it to be gone (bounded)."""
        pid = self.master_pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WITHIN_S
        while self.master_pid() is not None:
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                break
            await asyncio.sleep(0.02)
        for path in (self.layout.master, self.layout.stats, self.layout.pid):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def master_reloads(proc: str) -> tuple[int, int] | None:
    """The master's line of a ``show proc`` answer: how many reloads it made, and how many
    failed since the last that did not (None: no such line, an HAProxy that says neither)."""
    found = _MASTER_LINE.search(proc)
    return None if found is None else (int(found[1]), int(found[2]))


def description(info: str) -> str | None:
    """The ``description`` line of a ``show info`` answer (the config's marker), if any."""
    for line in info.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == "description":
            return value.strip()
    return None
