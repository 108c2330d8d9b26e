"""The runtime driver seam: how the platform builds, runs, watches and stops releases.

One driver serves every app of the platform (:class:`Driver`, shaped like Nomad's task driver
plugin: capabilities, start, wait, stop, recover, inspect, logs). A *release* is one
deployment's frozen spec and source (``release_id`` such as ``"12-3"``: app 12, deployment 3);
it runs as ``instances`` numbered instances (:class:`Instance`: where traffic reaches it).
Everything here is driver-neutral: what a driver can and cannot do is in its
:class:`Capabilities`, which the platform asks instead of the driver's type.
:class:`~appdeck.runtime.local.LocalDriver` implements it with local processes; how a
Kubernetes driver maps onto it is in docs/kubernetes.md and docs/runtime-seam.md §2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from appdeck.common.errors import FailedPrecondition
from appdeck.model.release import Release as Release
from appdeck.model.release import RuntimeKind as RuntimeKind

RUNTIMES: tuple[RuntimeKind, ...] = ("python", "node", "static", "command")
LogKind = Literal["build", "runtime"]
LogStream = Literal["stdout", "stderr", "system"]


InstanceCondition = Literal["running", "restarting", "crash_loop", "stopped"]
"""An instance as :meth:`Driver.inspect` sees it: ``running`` (its process runs),
``restarting`` (it exited unasked and waits for its restart), ``crash_loop`` (given up after
too many crashes), ``stopped``."""


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """What the driver knows of one instance now. Every field is the platform's own reading
    (counts, an exit status, a signal's name, bytes): nothing the app wrote."""

    index: int
    state: InstanceCondition
    restarts: int = 0
    """Restarts after a crash, since the instance was started (or adopted)."""
    last_exit: str | None = None
    """How its last process ended: ``status N`` or ``signal NAME``; None: not known."""
    oom_kills: int = 0
    """Processes of the instance the kernel's OOM killer killed, since it was started."""
    memory_bytes: int | None = None
    """Memory of its cgroup now (None: the driver has no cgroups)."""
    cpu_seconds: float | None = None
    """CPU time its cgroup used (None: the driver has no cgroups)."""
    started_at: float | None = None
    """When its current process started (epoch seconds)."""


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """An app's disk: bytes used against its quota."""

    used_bytes: int
    quota_bytes: int


InstanceEventKind = Literal["crashed", "restarted", "oom_killed", "given_up"]


@dataclass(frozen=True, slots=True)
class InstanceEvent:
    """An instance changed without being asked (see :meth:`Driver.events`)."""

    app_id: int
    release_id: str
    index: int
    kind: InstanceEventKind


InstanceWatcher = Callable[[InstanceEvent], None]


@dataclass(frozen=True, slots=True)
class Health:
    """One health check: ``ok`` for any 2xx or 3xx answer within the timeout (a driver's
    own reading, behind :meth:`Driver.wait_ready`)."""

    ok: bool
    detail: str
    status: int | None
    latency_ms: float


@dataclass(frozen=True, slots=True)
class LogLine:
    ts: float
    """When the line was read from the process (epoch seconds)."""
    stream: LogStream
    """``stdout`` / ``stderr`` of the process, or ``system`` for the driver's own events
    (build steps, start, exit, restart, stop, adoption)."""
    text: str
    seq: int
    """Increasing within one log of one release (gaps are possible); the cursor unit."""
    instance: int | None = None
    """Which instance wrote a runtime line (None for build lines)."""


class LogPage(NamedTuple):
    """Lines, oldest first, and the cursor to continue after them."""

    lines: list[LogLine]
    next_cursor: int


# -------------------------------------------------------------------- the one driver seam


@dataclass(frozen=True, slots=True)
class Instance:
    """One started instance of a release, as the platform sees it: where traffic reaches
    it. The driver keeps its own handle per ``(release_id, index)`` (a pid, a pod): nothing
    above the driver needs one."""

    release_id: str
    index: int
    upstream: str
    """What the router gets: ``127.0.0.1:<port>``, ``<netns>@127.0.0.1:<port>`` (an
    instance on a network namespace of its own), or ``<service>.<namespace>:<port>``."""
    started_at: float
    """When it started (the driver's clock, epoch seconds)."""


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether an instance became ready (its health check passed) within the time given."""

    ok: bool
    why: str
    """When not ok: what the last check saw, in words for a failed rollout (a crash loop
    and how the app last ended, the check's answer, or what it listens on instead)."""


@dataclass(frozen=True, slots=True)
class Adoption:
    """What :meth:`Driver.recover` found of a release's instances after a restart."""

    adopted: list[Instance]
    """Still running: supervised again, as if this driver had started them."""
    dead: list[int]
    """Indexes of instances gone while nobody watched: the caller starts them again."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a driver can and cannot do; the platform branches on these, never on types.
    Each field has a call site that branches on it (docs/runtime-seam.md §2.2)."""

    own_network: bool
    """Each instance has a network of its own: the spec's port is used as it is."""
    namespaced_upstreams: bool
    """Upstreams are ``<netns>@…``: the data plane needs netns fds from the driver."""
    host_processes: bool
    """Instances are processes of this host: shared by the replicas on it (one recovers
    what another started), pids to diagnose."""
    in_place_restart: bool
    """One index of a release can be stopped and started again with a fresh env."""
    indexed_instances: bool
    """Instances are addressable by index (``stop(release, i)``, a spare at index n)."""
    driver_grep: bool
    """``logs(grep=…)`` filters on the driver's side."""
    app_disks: bool
    """Per-app disks (hosted repositories and SQLite placed on them)."""


@runtime_checkable
class Driver(Protocol):
    """Builds, runs, supervises and observes releases (shaped like Nomad's task driver:
    capabilities, start, wait, stop, recover, inspect, logs). One driver serves every app.
    Methods are safe to call concurrently for different releases; calls for one release
    are serialised by the driver."""

    def capabilities(self) -> Capabilities:
        """What this driver can do (constant for its lifetime)."""
        ...

    async def prepare(self, release: Release, *, rebuild: bool = False) -> None:
        """Make the release runnable (workspace, build) within ``spec.build_timeout_s``;
        idempotent unless ``rebuild``. Raises InvalidArgument, QuotaExceeded, Conflict or
        :class:`BuildFailed` (whose ``log_tail`` is app output: never for a tool caller)."""
        ...

    async def start(self, release: Release, index: int) -> Instance:
        """Start instance ``index`` (the driver picks its port) and supervise it; returns
        at once: :meth:`wait_ready` says when it serves."""
        ...

    async def wait_ready(self, release: Release, instance: Instance, within_s: float) -> Readiness:
        """Wait up to ``within_s`` for the instance's health check to pass, or for the
        release to crash-loop (then at once); why not, in words."""
        ...

    async def gave_up(self, release_id: str) -> bool:
        """True once an instance of the release crash-looped (sticky until :meth:`remove`)."""
        ...

    async def stop(self, release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        """Stop one instance, or all (``index=None``), within ``grace_s``; nothing the
        instance started survives. Stopping what is not running is not an error."""
        ...

    async def running(self, release_id: str) -> list[Instance]:
        """The release's instances that run now (that this driver supervises), by index."""
        ...

    async def recover(self, release: Release) -> Adoption:
        """After a control-plane restart: supervise again the release's instances that
        still run, report the others. Idempotent. ``release`` carries the env values
        restarts of the adopted instances run with."""
        ...

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        """The release's instances as this driver knows them now, by index (cheap: a
        scrape of every app calls it on the event loop)."""
        ...

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        """The app's disk used against its quota, as last known (None: not counted)."""
        ...

    def events(self, watcher: InstanceWatcher) -> None:
        """Call ``watcher`` (on the event loop, never awaited: it must not block) whenever
        an instance crashes, is restarted, is OOM-killed or is given up."""
        ...

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage:
        """Lines after ``cursor`` (oldest first), or the newest ``limit`` when None."""
        ...

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage:
        """Like :meth:`logs` after ``cursor`` (None: from now on), waiting up to
        ``timeout_s`` for a line; an empty page when none came."""
        ...

    async def releases(self) -> list[str]:
        """The releases this driver has anything for (a workspace, instances)."""
        ...

    async def remove(self, release_id: str) -> None:
        """Stop every instance and delete what the driver kept for the release."""
        ...

    async def remove_app(self, app_id: int) -> None:
        """The app is deleted: delete what the driver kept for it as a whole (its disk)."""
        ...

    async def detach(self) -> None:
        """Stop supervising without stopping anything (shutdown): a later driver recovers
        the instances."""
        ...


class BuildFailed(FailedPrecondition):
    """The build of a release failed: a step exited non-zero or ran out of time.

    ``details``: ``release_id``, ``step``, ``exit_code`` (None on timeout), ``timed_out`` and,
    from the local driver, ``log_tail`` (the last lines of the build log: app output, for
    operators; never handed to a tool caller as is).
    """

    def __init__(
        self,
        message: str,
        *,
        release_id: str = "",
        step: str = "",
        exit_code: int | None = None,
        timed_out: bool = False,
        log_tail: list[str] | None = None,
    ) -> None:
        super().__init__(
            message,
            hint="read the build log of the release (tail_deploy_logs with kind 'build')",
            release_id=release_id,
            step=step,
            exit_code=exit_code,
            timed_out=timed_out,
        )
        self.release_id = release_id
        self.step = step
        self.exit_code = exit_code
        self.timed_out = timed_out
        self.log_tail = log_tail or []
