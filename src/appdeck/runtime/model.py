"""The local driver's in-memory model of releases and instances, its restart policy, and the
validation of what callers hand it (specs, release ids, health paths, log queries).
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from appdeck.common.errors import InvalidArgument
from appdeck.runtime.appdb import DatabaseGrant
from appdeck.runtime.driver import RUNTIMES, LogKind, Release
from appdeck.runtime.logfile import LogWriter

RELEASE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_INDEX: Final = 999


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When a crashed instance is restarted, and when the release is declared unhealthy."""

    initial_backoff_s: float = 0.5
    max_backoff_s: float = 10.0
    crash_limit: int = 5
    """More crashes than this within ``window_s`` is a crash loop."""
    window_s: float = 60.0
    reset_after_s: float = 60.0
    """A run at least this long starts the backoff over."""


@dataclass(frozen=True, slots=True)
class Handle:
    """The local driver's own handle on one running instance (Nomad's ``DriverState``): a
    process and its address. Nothing above the driver sees one (the platform gets a
    :class:`~appdeck.runtime.driver.Instance`); the driver's tests and benchmarks do."""

    release_id: str
    index: int
    port: int
    pid: int
    """The instance's root process (its shim, whose process group holds the app)."""
    started_at: float
    """When this process started (epoch seconds)."""
    netns: str | None = None
    """Sandboxed: the instance's network namespace, by name (``"<release_id>.<index>"``):
    ``port`` is on the loopback of that namespace, reached through the driver's
    ``netns_fd``. None: ``port`` is on the host's loopback."""


@dataclass(slots=True, eq=False)
class InstanceState:
    """One instance of a release: its port, its shim process, and its supervision state."""

    index: int
    port: int
    pid: int | None = None
    start_ticks: int = 0
    started_at: float = 0.0
    own_child: bool = False
    exit_code: int | None = None
    """How its last process ended, when it was our child: the app's exit status, or 128 + the
    signal that killed it (the shim passes the app's on); -N: the shim itself got signal N."""
    pidfd: int | None = None
    stopping: bool = False
    supervisor: asyncio.Task[None] | None = None
    crashes: deque[float] = field(default_factory=deque)
    backoff_s: float = 0.0
    sandboxed: bool = False
    netns_fd: int | None = None
    """An fd of the network namespace of process ``netns_pid`` (sandboxed instances)."""
    netns_pid: int | None = None
    database: DatabaseGrant | None = None
    """How the instance reaches its app's database (asked for when it is started)."""
    restarts: int = 0
    """Restarts after a crash since it was started (or adopted) here."""
    oom_kills: int = 0
    """OOM kills counted in the groups of its earlier processes (each restart has a new
    group: the current one's count is read from :attr:`oom_events`)."""
    oom_events: Path | None = None
    """Where the current group counts its OOM kills (None: no group, or already counted)."""
    last_code: int | None = None
    """:attr:`exit_code` of its last crash, kept across the restart that follows."""

    def last_exit(self) -> str | None:
        """How its last crashed process ended, for health facts: ``status 3``, ``signal
        SIGKILL``, or None when unknown (not our child, or no crash yet)."""
        return exit_words(self.last_code)

    def how_it_ended(self) -> str:
        """In words, for the runtime log's crash lines: `` (status 3)``, `` (killed by
        SIGKILL)``, or nothing when unknown (not our child)."""
        words = exit_words(self.exit_code)
        if words is None:
            return ""
        if not words.startswith("signal "):
            return f" ({words})"
        name = words[7:]
        return f" (killed by {'signal ' + name if name.isdigit() else name})"

    def handle(self, release_id: str) -> Handle:
        return Handle(
            release_id,
            self.index,
            self.port,
            self.pid or 0,
            self.started_at,
            f"{release_id}.{self.index}" if self.sandboxed else None,
        )

    def record(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "port": self.port,
            "pid": self.pid,
            "pgid": self.pid,
            "start_ticks": self.start_ticks,
            "started_at": self.started_at,
            "restarts": self.restarts,
            "last_code": self.last_code,
            "oom_kills": self.oom_kills,
        }


@dataclass(slots=True, eq=False)
class ReleaseState:
    """A release known to the driver: its directory, last spec and supervised instances."""

    release_id: str
    directory: Path
    release: Release | None = None
    instances: dict[int, InstanceState] = field(default_factory=dict)
    unhealthy: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    writer: LogWriter | None = None
    disk_root: Path | None = None
    """Where the workspace is on the app's disk (:mod:`.disks`); None: in ``directory``."""
    given_up: dict[int, InstanceState] = field(default_factory=dict)
    """Instances given up after a crash loop, by index, for :meth:`inspect` (until the
    release is removed or the index is started again)."""

    @property
    def workspace(self) -> Path:
        return (self.disk_root or self.directory) / "src"

    def log(self, kind: LogKind) -> Path:
        return self.directory / f"{kind}.log"


def exit_words(code: int | None) -> str | None:
    """``status N`` or ``signal NAME`` for an exit code as :attr:`InstanceState.exit_code`
    holds it (128 + N, or -N: signal N)."""
    if code is None:
        return None
    if code < 0 or code > 128:
        number = -code if code < 0 else code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return f"signal {name}"
    return f"status {code}"


def instance_key(state: ReleaseState, instance: InstanceState) -> str:
    """The instance's name for its cgroup and its network namespace: ``<release>.<index>``."""
    return f"{state.release_id}.{instance.index}"


# -------------------------------------------------------------------- validation


def validate(release: Release) -> None:
    check_release_id(release.release_id)
    if release.app_id < 0:
        raise InvalidArgument(f"app_id must not be negative, not {release.app_id}")
    if release.spec.runtime not in RUNTIMES:
        raise InvalidArgument(
            f"runtime must be one of {', '.join(RUNTIMES)}, not {release.spec.runtime!r}"
        )
    if release.spec.instances < 0:
        raise InvalidArgument("instances must not be negative")
    if release.spec.build_timeout_s <= 0 or release.spec.health_check.timeout_s <= 0:
        raise InvalidArgument("timeouts must be positive")
    check_health_path(release.spec.health_check.path)
    for name, value in release.env.items():
        if not ENV_NAME.fullmatch(name):
            raise InvalidArgument(f"invalid environment variable name {name!r}")
        if "\0" in value:
            raise InvalidArgument(f"environment variable {name} contains a NUL character")
    for command in (release.spec.build_command, release.spec.run_command):
        if command is not None and "\0" in command:
            raise InvalidArgument("commands must not contain NUL characters")


def check_release_id(release_id: str) -> None:
    if not isinstance(release_id, str) or not RELEASE_ID.fullmatch(release_id):
        raise InvalidArgument(
            f"invalid release id {release_id!r}: letters, digits, '.', '_' and '-' only"
        )


def check_health_path(path: str) -> None:
    if not path.startswith("/") or any(c.isspace() or ord(c) < 32 for c in path):
        raise InvalidArgument(f"health path must start with '/' and hold no spaces: {path!r}")


def check_log_args(cursor: int | None, limit: int, grep: str | None) -> None:
    if cursor is not None and cursor < 0:
        raise InvalidArgument("cursor must not be negative")
    if not 1 <= limit <= 10_000:
        raise InvalidArgument("limit must be 1..10000")
    if grep is not None and len(grep) > 500:
        raise InvalidArgument("grep must be at most 500 characters")
