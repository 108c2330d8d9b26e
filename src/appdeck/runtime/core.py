"""The shared core of :class:`~appdeck.runtime.local.LocalDriver`: its settings, the
releases it knows (in memory, or found on disk after a restart), their log writers and
``instances.json``, and the environment its builds and instances run with.

The driver's concerns are mixins over :class:`DriverCore`: :mod:`.build`, :mod:`.supervision`,
:mod:`.stopping` and :mod:`.adoption`, assembled in :mod:`.local`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from appdeck.common.errors import InvalidArgument, NotFound
from appdeck.runtime.appdb import DatabaseAccess, DatabaseGrant
from appdeck.runtime.disks import AppDisks, split
from appdeck.runtime.driver import (
    Instance,
    InstanceEvent,
    InstanceEventKind,
    InstanceWatcher,
    LogKind,
    Release,
)
from appdeck.runtime.egress import EgressProxy, proxy_env
from appdeck.runtime.logfile import LOG_MAX_BYTES, LogWriter
from appdeck.runtime.model import (
    InstanceState,
    ReleaseState,
    RestartPolicy,
    check_release_id,
    instance_key,
)
from appdeck.runtime.pgfront import PostgresFront
from appdeck.runtime.sandbox import APP_DIR, SANDBOX_PATH, Sandbox
from appdeck.runtime.shim import boot_id, is_running
from appdeck.runtime.state import (
    count_stop,
    load_records,
    read_json,
    read_spec,
    records,
    save_instances,
    spec_to_json,
)
from appdeck.runtime.workspace import CopyLimits

PASSED_ENV: Final = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
)
"""The only variables of the server's own environment an app or a build sees: locale, paths,
proxies and CA bundles; never the server's settings or secrets (``APPDECK_*``, ...)."""
_LOCALE_ENV: Final = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
"""What a sandboxed app gets of the server's environment: its locale."""
BUILD_ENV_PREFIXES: Final = ("PIP_", "NPM_CONFIG_", "npm_config_")
_CA_ENV: Final = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
"""Package-manager settings of the machine (indexes, mirrors, caches), for builds only."""


class DriverCore:
    """Settings and bookkeeping shared by every part of the local driver."""

    def __init__(
        self,
        runtime_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        restart: RestartPolicy | None = None,
        log_max_bytes: int = LOG_MAX_BYTES,
        source_limits: CopyLimits | None = None,
        leftover_grace_s: float = 2.0,
        sandbox: Sandbox | None = None,
        egress: EgressProxy | None = None,
        databases: DatabaseAccess | None = None,
        pgfront: PostgresFront | None = None,
        disks: AppDisks | None = None,
        disk_check_s: float = 30.0,
    ) -> None:
        self.runtime_dir = Path(runtime_dir).resolve()
        self.clock = clock
        self.restart = restart or RestartPolicy()
        self.log_max_bytes = log_max_bytes
        self.source_limits = source_limits or CopyLimits()
        self.leftover_grace_s = leftover_grace_s
        self.sandbox = sandbox
        """None: apps run unsandboxed, as the server's user (``APPDECK_SANDBOX=off``)."""
        self.egress = egress if egress is not None or sandbox is None else EgressProxy()
        """The outbound proxy served in sandboxes' namespaces (builds; instances that ask)."""
        self.databases = databases
        """Where instances get ``DATABASE_URL`` from (None: they get none)."""
        self.pgfront = pgfront if pgfront is not None or sandbox is None else PostgresFront()
        """A sandboxed instance's road to its PostgreSQL database (:mod:`.pgfront`)."""
        self.disks = disks
        """Each app's disk quota (:mod:`.disks`); None: not counted."""
        self.disk_check_s = disk_check_s
        self._disk_watch: asyncio.Task[None] | None = None
        """``account`` mode: the loop measuring running apps (started with the first one)."""
        self.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._digest_key = _digest_key(self.runtime_dir / ".env-digest.key")
        self._releases: dict[str, ReleaseState] = {}
        self._recorded_netns: dict[str, tuple[int, int, int]] = {}
        """Network namespaces of instances another replica on this host started, by
        ``"<release_id>.<index>"``: (pid, start ticks, fd). See ``netns_fd``."""
        self._boot_id = boot_id()
        self._watchers: list[InstanceWatcher] = []
        self.started: list[Callable[[Release, Instance], None]] = []
        """Called (never awaited, must not block) with each instance :meth:`start` made,
        before its health check: the data plane prepares its route to it meanwhile."""
        self._disk_used: dict[int, int] = {}
        """``account`` mode: each app's bytes as last measured (``check_disks``)."""

    # ---------------------------------------------------------------- watchers

    def events(self, watcher: InstanceWatcher) -> None:
        """See :meth:`~appdeck.runtime.driver.Driver.events`."""
        self._watchers.append(watcher)

    def _tell(self, state: ReleaseState, instance: InstanceState, kind: InstanceEventKind) -> None:
        """Tell the watchers what happened to ``instance`` (a watcher's failure is logged)."""
        app_id = state.release.app_id if state.release is not None else None
        if app_id is None:
            head = state.release_id.split("-", 1)[0]
            if not head.isdigit():
                return
            app_id = int(head)
        event = InstanceEvent(app_id, state.release_id, instance.index, kind)
        for watcher in list(self._watchers):
            try:
                watcher(event)
            except Exception:  # a watcher's failure must not stop supervision
                logging.getLogger("appdeck.runtime").exception("instance watcher failed")

    # ---------------------------------------------------------------- bookkeeping

    def _release(self, release_id: str, *, create_for: Release) -> ReleaseState:
        state = self._existing(release_id)
        if state is None:
            directory = self.runtime_dir / "apps" / str(create_for.app_id) / "releases" / release_id
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            state = ReleaseState(release_id, directory)
            state.disk_root = self._disk_root(create_for.app_id, release_id, directory)
            self._releases[release_id] = state
        return state

    def _disk_root(self, app_id: int, release_id: str, directory: Path) -> Path | None:
        """The release's place on its app's disk; None without one, or for a release built
        before the app had a disk (its workspace stays where it was)."""
        if self.disks is None or not self.disks.kernel or (directory / "src").is_dir():
            return None
        return self.disks.release_root(app_id, release_id)

    def _app_idle(self, app_id: int) -> bool:
        """No instance of the app runs (supervised here, or recorded and alive)."""
        for directory in self.runtime_dir.glob(f"apps/{int(app_id)}/releases/*"):
            with contextlib.suppress(InvalidArgument):
                state = self._existing(directory.name)
                if state is not None and (state.instances or self._recorded_alive(state)):
                    return False
        return True

    def _disk_mb(self, release: Release) -> int:
        """The app's disk quota: ``spec.resources.disk_mb``, else the operator's default."""
        resources: Any = release.spec.resources
        if isinstance(resources, Mapping):
            asked = resources.get("disk_mb")
        else:
            asked = getattr(resources, "disk_mb", None)
        default = self.disks.default_mb if self.disks is not None else 1024
        return int(asked) if isinstance(asked, int) and asked > 0 else default

    def _tmp_mb(self, release: Release) -> int | None:
        """The size of the sandbox's ``/tmp`` (None: not limited)."""
        if self.disks is None or self.disks.mode == "off":
            return None
        return split(self._disk_mb(release)).tmp_mb

    def _existing(self, release_id: str) -> ReleaseState | None:
        """The release, from memory or (after a restart) from its directory."""
        check_release_id(release_id)
        state = self._releases.get(release_id)
        if state is not None:
            return state
        for directory in self.runtime_dir.glob(f"apps/*/releases/{release_id}"):
            if directory.is_dir():
                state = ReleaseState(release_id, directory)
                with contextlib.suppress(ValueError):
                    app_id = int(directory.parent.parent.name)
                    state.disk_root = self._disk_root(app_id, release_id, directory)
                recorded = read_json(directory / "instances.json")
                state.unhealthy = bool(recorded.get("unhealthy", False))
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    state.release = read_spec(directory / "release.json")
                self._releases[release_id] = state
                return state
        return None

    def _log_path(self, release_id: str, kind: LogKind) -> Path:
        if kind not in ("build", "runtime"):
            raise InvalidArgument(f"log kind must be 'build' or 'runtime', not {kind!r}")
        state = self._existing(release_id)
        if state is None:
            raise NotFound(f"no release {release_id} on this runtime")
        return state.log(kind)

    def _writer(self, state: ReleaseState) -> LogWriter:
        if state.writer is None:
            state.writer = LogWriter(
                state.log("runtime"), max_bytes=self.log_max_bytes, clock=self.clock
            )
        return state.writer

    def _recorded_alive(self, state: ReleaseState) -> list[dict[str, Any]]:
        """Instances recorded on disk whose process still runs."""
        recorded = read_json(state.directory / "instances.json")
        if recorded.get("boot_id") != self._boot_id:
            return []
        return [
            record
            for record in records(recorded)
            if is_running(int(record["pid"]), int(record["start_ticks"]))
        ]

    def _record_running(self, state: ReleaseState, instance: InstanceState) -> None:
        """The instance's record names its process now (under :func:`.state.locked`)."""
        found, unhealthy, stops = load_records(state.directory, self._boot_id)
        found[instance.index] = instance.record()
        save_instances(
            state.directory,
            state.release_id,
            self._boot_id,
            found,
            unhealthy=unhealthy,
            stops=stops,
        )

    def _unrecord(
        self, state: ReleaseState, index: int | None, *, unhealthy: bool = False
    ) -> list[dict[str, Any]]:
        """Remove the records of instance ``index`` (None: all): the intent to stop them,
        written before any signal (under :func:`.state.locked`), and counted (a start of
        them under way elsewhere finds it, see :func:`.state.stop_mark`). Returns them."""
        found, marked, stops = load_records(state.directory, self._boot_id)
        taken = [found.pop(i) for i in sorted(found) if index is None or i == index]
        save_instances(
            state.directory,
            state.release_id,
            self._boot_id,
            found,
            unhealthy=marked or unhealthy,
            stops=count_stop(stops, index),
        )
        return taken

    # ---------------------------------------------------------------- environment

    async def _release_group(self, state: ReleaseState, instance: InstanceState) -> None:
        """After an instance's process ended: stop its outbound proxy, kill what is left in
        its cgroup and remove the group."""
        await self._release_listeners(state, instance)
        await self._remove_group(state, instance)

    async def _release_listeners(self, state: ReleaseState, instance: InstanceState) -> None:
        """Stop what this process served in the instance's namespace (its outbound proxy,
        its PostgreSQL front)."""
        key = instance_key(state, instance)
        if self.egress is not None:
            await self.egress.stop(key)
        if self.pgfront is not None:
            await self.pgfront.stop(key)

    async def _remove_group(self, state: ReleaseState, instance: InstanceState) -> None:
        """Kill what is left in the instance's cgroup and remove it: only whoever decided
        the instance is over (its stop, or the restart of its crash, under the release's
        lock): the group's key is the instance's, whatever process runs in it now."""
        cgroups = self.sandbox.cgroups if self.sandbox is not None else None
        if cgroups is not None:
            await asyncio.to_thread(cgroups.remove, instance_key(state, instance))

    async def _database_grant(self, release: Release) -> DatabaseGrant | None:
        """How an instance of ``release`` reaches its app's own database."""
        if self.databases is None:
            return None
        return await self.databases.grant(release.app_id, sandboxed=self.sandbox is not None)

    def _env(
        self,
        release: Release,
        workspace: Path,
        *,
        port: int | None,
        egress: bool = False,
        database: DatabaseGrant | None = None,
    ) -> dict[str, str]:
        """The whole environment of a build step (``port`` None) or an instance: nothing of
        the server's own but locale, paths (and, unsandboxed, proxies and package-manager
        settings), then the app's env, then ``PORT``/``HOST`` and ``DATABASE_URL``, which
        are always the platform's."""
        if self.sandbox is not None:
            env = {name: os.environ[name] for name in _LOCALE_ENV if name in os.environ}
            if port is None:  # a build: the machine's package-manager settings and CA bundles
                env.update(
                    (name, value)
                    for name, value in os.environ.items()
                    if name.startswith(BUILD_ENV_PREFIXES) or name in _CA_ENV
                )
            env["PATH"] = SANDBOX_PATH
            env["HOME"] = "/tmp"  # noqa: S108 - the sandbox's private tmpfs
            inside = Path(APP_DIR)
        else:
            env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
            if port is None:  # a build
                env.update(
                    (name, value)
                    for name, value in os.environ.items()
                    if name.startswith(BUILD_ENV_PREFIXES)
                )
            env.setdefault("PATH", os.defpath)
            inside = workspace
        env["PYTHONUNBUFFERED"] = "1"
        env.update(release.env if port is not None else release.build_env)
        if egress:
            env.update(proxy_env())
        if self.sandbox is None:
            for bin_dir in (".venv/bin", "node_modules/.bin"):
                if (workspace / bin_dir).is_dir():
                    env["PATH"] = f"{inside / bin_dir}{os.pathsep}{env['PATH']}"
        else:
            env["PATH"] = SANDBOX_PATH
        if (workspace / ".venv").is_dir():
            env["VIRTUAL_ENV"] = str(inside / ".venv")
        if port is not None:  # always the platform's, whatever the app's env says
            env["PORT"] = str(port)
            env["HOST"] = "127.0.0.1"
            if database is not None:
                env.update(database.env)
        return env

    def _record(self, release: Release) -> dict[str, Any]:
        """``spec`` as its state files record it (no env values)."""
        return spec_to_json(release, self.env_digest(release.env))

    def env_digest(self, env: Mapping[str, str]) -> str:
        """A keyed digest of env values: state files record names and this, never values."""
        body = json.dumps(sorted(env.items()), ensure_ascii=False).encode()
        return hmac.new(self._digest_key, body, hashlib.sha256).hexdigest()


def _digest_key(path: Path) -> bytes:
    try:
        key = path.read_bytes()
        if len(key) == 32:
            return key
    except OSError:
        pass
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key
