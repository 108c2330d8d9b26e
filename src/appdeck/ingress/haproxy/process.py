"""The HAProxy process: started in master-worker mode as a daemon (its own session, so it
outlives ``appdeck serve`` like the app shims), adopted by the next start, reloaded through
its master socket, stopped on request.

One data plane per host and install: every replica on the host drives the same process, and
each change (write the files, start or reload, set weights) happens under the data plane's
lease (:mod:`.lease`: ``<dir>/lease``, taken over from a holder stopped past its end).

A process is ours when its pid file names a live process whose command line is HAProxy with
our config file. Which configuration the worker runs is read back, not assumed: the config's
``description`` carries a digest of it (:attr:`Rendered.marker`) and ``show info`` answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
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
RECHECKS: Final = 3
"""How often one reload takes a newer config checked after the first (:meth:`HAProxyProcess.apply`):
a bound, so that changes coming faster than checks never hold a reload back."""


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

        ``newer`` is asked after each check, with the config just checked, for one to take
        instead (what it wants changed meanwhile: the next instance of a set started during
        this check); that one is written and checked in turn, at most :data:`RECHECKS` times,
        and one reload takes both changes (a check is a third of a reload's time)."""
        if self.running() and await self.marker() == rendered.marker:
            self.check_held()
            self.write(rendered)  # weights may differ: a later reload restores these
            return "unchanged"
        for turn in range(RECHECKS + 1):
            self.check_held()
            self.write(rendered)
            await self.check()
            instead = await newer(rendered) if newer is not None and turn < RECHECKS else None
            if instead is None:
                break
            rendered = instead
        self.check_held()
        if self.running():
            await self.master.raw("reload")
            await self.wait_for(rendered.marker)
            return "reloaded"
        await self.start(rendered.marker)
        return "started"

    async def check(self) -> None:
        """``haproxy -c``: a refused config never reaches the running process."""
        proc = await asyncio.create_subprocess_exec(
            str(self.binary),
            "-c",
            "-q",
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
            proc = await asyncio.create_subprocess_exec(
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

    async def wait_for(self, marker: str) -> None:
        """Until the worker answering the stats socket runs the config ``marker`` names, and
        the master answers again (it re-executes itself on a reload and listens on its
        socket a moment after the new worker does: the next reload needs it)."""
        deadline = time.monotonic() + READY_WITHIN_S
        while await self.marker() != marker:
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


def description(info: str) -> str | None:
    """The ``description`` line of a ``show info`` answer (the config's marker), if any."""
    for line in info.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == "description":
            return value.strip()
    return None
