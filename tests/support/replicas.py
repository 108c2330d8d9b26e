"""Three (or more) ``appdeck serve`` replicas behind the test proxy, sharing one PostgreSQL
database, one Redis prefix and one secret key: the set-up of issue 13's must-show."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import secrets
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.appdeck_process import AppDeckProcess, reap_haproxy, start_appdeck
from tests.support.proxy import ReplicaProxy, serve_proxy
from tests.support.redis import REDIS_URL

LOCK_FILE = Path(tempfile.gettempdir()) / "appdeck-test-replica-sets.lock"
DEV_PASSWORD = re.compile(r"admin user 'dev', password: (\S+)")


@dataclass
class Replicas:
    proxy: ReplicaProxy
    origin: str
    """The proxy's ``http://127.0.0.1:PORT``: the one URL clients use."""
    env: dict[str, str]
    data_dir: Path
    log_dir: Path
    servers: list[AppDeckProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"{self.origin}/mcp"

    @property
    def token(self) -> str:
        token = self.servers[0].token
        assert token is not None
        return token

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    async def add(self) -> AppDeckProcess:
        """Start one more replica and put it behind the proxy (last in the order)."""
        (server,) = await self.add_together(1)
        return server

    async def add_together(self, count: int) -> list[AppDeckProcess]:
        """Start ``count`` more replicas at once and put them behind the proxy in the order of
        their names (B before C, whichever printed its URL first). When one fails, the others
        are stopped or, started already, kept in :attr:`servers` for the set's teardown."""
        first = len(self.servers)
        tasks = [
            asyncio.create_task(
                start_appdeck(
                    self.data_dir,
                    log_dir=self.log_dir,
                    name=f"replica-{name}",
                    env=self.env,
                    within=40,
                )
            )
            for name in "ABCDEFGH"[first : first + count]
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()  # a start still waiting kills its process (start_appdeck)
            await asyncio.wait(tasks)
            for task in tasks:
                if not task.cancelled() and task.exception() is None:
                    self.servers.append(task.result())
                    self.proxy.upstreams.append(task.result().origin)
        return self.servers[first:]

    async def restart(self, index: int) -> AppDeckProcess:
        """Start a new replica in the place of ``servers[index]`` (killed or stopped before):
        same data dir and settings, its own log files, the proxy's upstream replaced."""
        old = self.servers[index]
        assert not old.running, "stop or kill the replica first"
        name = "ABCDEFGH"[index]
        runs = sum(1 for p in self.log_dir.glob(f"replica-{name}*.stdout*"))
        server = await start_appdeck(
            self.data_dir,
            log_dir=self.log_dir,
            name=f"replica-{name}{runs + 1}",
            env=self.env,
            within=40,
        )
        self.servers[index] = server
        self.proxy.upstreams[self.proxy.upstreams.index(old.origin)] = server.origin
        return server

    def dev_password(self) -> str:
        """The dev admin's password, printed by the replica that made the dev tenant."""
        for server in self.servers:
            found = DEV_PASSWORD.search(Path(server.stdout_path).read_text(errors="replace"))
            if found:
                return found.group(1)
        raise AssertionError("no replica printed the dev password")

    def logs(self, lines: int = 30) -> str:
        return "\n".join(
            f"--- {Path(s.stderr_path).name}\n{s.log_tail(lines)}" for s in self.servers
        )

    def report(self, notable: int = 60, tail: int = 20) -> str:
        """For a failed test's report: each replica's warnings and errors (with their
        tracebacks; the last ``notable`` lines of them), then its last ``tail`` lines."""
        return "\n".join(
            f"--- {Path(s.stderr_path).name}: above info\n{s.notable(notable)}\n"
            f"--- {Path(s.stderr_path).name}: last lines\n{s.log_tail(tail)}"
            for s in self.servers
        )


@contextlib.asynccontextmanager
async def run_replicas(
    database_url: str,
    redis_prefix: str,
    tmp_path: Path,
    count: int = 3,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[Replicas]:
    """``count`` replicas, the proxy in front: the first alone (it migrates the database and
    makes the dev tenant), then the others at once; all stopped (SIGTERM, then SIGKILL) at
    the end.

    One replica set at a time on this machine (a lock file shared by the pytest-xdist
    workers): each replica keeps a pool of PostgreSQL connections, and two or three sets at
    once exhaust the server's 100 ("too many clients already")."""
    async with (
        _one_set_at_a_time(),
        _run(database_url, redis_prefix, tmp_path, count, extra_env) as replicas,
    ):
        yield replicas


@contextlib.asynccontextmanager
async def _one_set_at_a_time(within: float = 900.0) -> AsyncIterator[None]:
    with LOCK_FILE.open("a") as handle:
        async with asyncio.timeout(within):
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.5)  # another process holds the lock
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.asynccontextmanager
async def _run(
    database_url: str,
    redis_prefix: str,
    tmp_path: Path,
    count: int,
    extra_env: dict[str, str] | None,
) -> AsyncIterator[Replicas]:
    proxy = ReplicaProxy()
    async with serve_proxy(proxy) as origin:
        env = {
            "APPDECK_DATABASE_URL": database_url,
            "APPDECK_REDIS_URL": REDIS_URL,
            "APPDECK_REDIS_PREFIX": redis_prefix,
            "APPDECK_SECRET_KEY": secrets.token_urlsafe(32),
            "APPDECK_PUBLIC_URL": origin,
            **(extra_env or {}),
        }
        replicas = Replicas(proxy, origin, env, tmp_path / "data", tmp_path / "logs")
        try:
            await replicas.add()
            if count > 1:
                await replicas.add_together(count - 1)
            yield replicas
        finally:
            for server in reversed(replicas.servers):
                with contextlib.suppress(Exception):
                    await server.stop()
            reap_haproxy(tmp_path)  # issue 21: the replicas' shared data plane
            reap_shims(replicas.data_dir)


def reap_shims(data_dir: Path) -> None:
    """Kill what a test left running of its apps (each instance's shim leads its process
    group): apps outlive the replicas by design, and a test that could not delete its app (its
    replica died) must not leave the app's processes on the host. Said on stderr: a leak is
    the test's bug to fix, not a normal end."""
    runtime = str((data_dir / "runtime").resolve()) + "/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = [
                a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0")
            ]
        except OSError:
            continue
        if not any(w.endswith("/shim.py") for w in words) or "--log" not in words[:-1]:
            continue
        if words[words.index("--log") + 1].startswith(runtime):
            print(f"test left app instance {entry.name} running: killed", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(entry.name), signal.SIGKILL)


def app_processes(data_dir: Path, app_id: int) -> dict[str, int]:
    """The host's process table, read: how many instance shims of app ``app_id`` (under
    ``data_dir``'s runtime) run, by release id. Each instance is one shim leading its
    process group (the app's processes are its descendants)."""
    apps = str((data_dir / "runtime" / "apps" / str(app_id)).resolve()) + "/"
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_bytes().rpartition(b")")[2].split()[0]
        except OSError:
            continue
        if state == b"Z" or not any(a.endswith(b"/shim.py") for a in argv):
            continue
        words = [a.decode(errors="replace") for a in argv]
        if "--log" not in words[:-1]:
            continue
        log = words[words.index("--log") + 1]  # the workspace may be on the app's disk
        if log.startswith(apps):  # <apps>/releases/<release_id>/runtime.log
            release_id = Path(log).parent.name
            found[release_id] = found.get(release_id, 0) + 1
    return found
