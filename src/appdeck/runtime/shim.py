"""The instance shim: the first process of every app instance, and the stdlib-only /proc
helpers it shares with the driver. Its log writer is :mod:`.logfile` and its confinement
:mod:`.confine`, stdlib-only siblings it loads by path.

The local driver never runs an app directly. It spawns

    python -I -S -c <SHIM_BOOT> .../shim.py --log <release>/runtime.log --instance N \
        --cwd <workspace> -- /bin/sh -c '<run command>'

in a new session (so the shim is the leader of a new process group, pgid == shim pid), and the
shim spawns the app in that same group (``supervision.SHIM_BOOT`` loads this file by path as a
module and calls :func:`main`: from its compiled ``__pycache__`` form, not compiled again at
every start). Why a shim:

- **Logs survive the server.** The app's stdout and stderr are pipes owned by the shim, which
  writes every line, timestamped, to the release's ``runtime.log``. When the server dies (even
  ``kill -9``) nothing the app writes is lost and the app never gets EPIPE; a restarted server
  adopts the shim and reads the same file.
- **No orphans.** The shim is a child subreaper (``PR_SET_CHILD_SUBREAPER``): descendants that
  leave the process group (``setsid``, daemonising double forks) are re-parented to it instead
  of init. When the app exits, for whatever reason, the shim stops what is left of the group
  and of its descendants (SIGTERM, then SIGKILL after ``--grace``) before it exits itself, so a
  crashed app never leaves a grandchild holding its port.
- **One SIGTERM, to everyone.** The driver signals only the shim; the shim forwards SIGTERM,
  SIGINT, SIGHUP and SIGQUIT to the whole group once (it ignores its own copy), like ``tini -g``.
  SIGKILL of the group after the grace period is the driver's job.
- **Exit status.** The shim exits with the app's status (128 + signal when it was killed), and
  writes ``started`` / ``exited`` lines (stream ``system``) to the log itself.

This file is executed by path with ``-I -S`` (isolated: PYTHON* variables of the app's
environment, user site-packages and site-packages are all ignored), so it must not import
anything outside the standard library. The driver imports it as an ordinary module; importing
it has no side effects.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import os
import selectors
import signal
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType

TYPE_CHECKING = False
"""Neither ``typing`` nor ``dataclasses`` is imported: with what they pull in (``inspect``,
``ast``, ...) they were ~50 M instructions of every instance's start (valgrind)."""
if TYPE_CHECKING:
    from appdeck.runtime.confine import Confinement


def _sibling(name: str) -> types.ModuleType:
    """A stdlib-only module beside this file (``confine``) or one level up (``netns``),
    loaded by path: this file runs outside the package, under ``python -I -S``."""
    here = Path(__file__).resolve().parent
    path = here / f"{name}.py" if (here / f"{name}.py").is_file() else here.parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"appdeck_{name}", path)
    if spec is None or spec.loader is None:
        raise OSError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


try:
    from appdeck.runtime import logfile
except ImportError:  # run by path under -I -S: the package is not importable here
    logfile = _sibling("logfile")

_PR_SET_CHILD_SUBREAPER = 36
DISK_CHECK_S = 2.0
DISK_FULL_BYTES = 4 * 1024 * 1024
"""Less room than this (or 1 %) is a full disk: a write of a few MiB fails with ENOSPC before
the last free blocks are used (ext4 keeps some for its metadata)."""
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


# --------------------------------------------------------------------------------------------
# /proc


class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the runtime needs. ``start_ticks``: the start time
    in clock ticks after boot: with the pid, it names one process for good. Read-only."""

    __slots__ = ("pgrp", "pid", "ppid", "session", "start_ticks", "state")
    pid: int
    ppid: int
    pgrp: int
    session: int
    state: str
    start_ticks: int

    def __init__(
        self, *, pid: int, ppid: int, pgrp: int, session: int, state: str, start_ticks: int
    ) -> None:
        for name, value in (
            ("pid", pid),
            ("ppid", ppid),
            ("pgrp", pgrp),
            ("session", session),
            ("state", state),
            ("start_ticks", start_ticks),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ProcStat is read-only: cannot set {name}")

    def _fields(self) -> tuple[int, int, int, int, str, int]:
        return (self.pid, self.ppid, self.pgrp, self.session, self.state, self.start_ticks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcStat) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "ProcStat(pid={}, ppid={}, pgrp={}, session={}, state={!r}, start_ticks={})".format(
            *self._fields()
        )

    @property
    def running(self) -> bool:
        """Alive (not a zombie waiting to be reaped, not dead)."""
        return self.state not in ("Z", "X", "x")


def proc_stat(pid: int) -> ProcStat | None:
    """The process ``pid``, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return _parse_stat(pid, raw)


def _parse_stat(pid: int, raw: bytes) -> ProcStat | None:
    # The command name (field 2) is in parentheses and may contain anything, ")" included:
    # the fixed fields start after the last ")".
    end = raw.rfind(b")")
    fields = raw[end + 2 :].split()
    if end < 0 or len(fields) < 20:
        return None
    try:
        return ProcStat(
            pid=pid,
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            state=fields[0].decode("ascii", "replace"),
            start_ticks=int(fields[19]),
        )
    except ValueError:
        return None


def all_procs() -> list[ProcStat]:
    """Every process this user can see."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat is not None:
                found.append(stat)
    return found


def is_running(pid: int, start_ticks: int | None = None) -> bool:
    """True when ``pid`` is alive and, if ``start_ticks`` is given, is the same process that
    started then (not a later process that reused the pid)."""
    stat = proc_stat(pid)
    if stat is None or not stat.running:
        return False
    return start_ticks is None or stat.start_ticks == start_ticks


def group_members(pgid: int, procs: Iterable[ProcStat] | None = None) -> list[ProcStat]:
    """The running members of process group ``pgid``."""
    return [p for p in (all_procs() if procs is None else procs) if p.pgrp == pgid and p.running]


def descendants(root: int, procs: Iterable[ProcStat] | None = None) -> list[ProcStat]:
    """The running descendants of ``root`` (children, their children, ...), not ``root``."""
    table = list(all_procs() if procs is None else procs)
    children: dict[int, list[ProcStat]] = {}
    for proc in table:
        children.setdefault(proc.ppid, []).append(proc)
    found: list[ProcStat] = []
    todo = [root]
    seen = {root}
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.pid not in seen:
                seen.add(child.pid)
                todo.append(child.pid)
                if child.running:
                    found.append(child)
    return found


def boot_id() -> str:
    """This boot's id: start ticks only name a process within one boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux); False when unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def close_inherited_fds() -> None:
    """Close descriptors above stderr that this process inherited (Python opens its own
    non-inheritable), so that no descriptor of the server leaks into an app."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):
                if os.get_inheritable(fd):
                    os.close(fd)


def signal_quietly(pid: int, signum: int, start_ticks: int | None = None) -> None:
    """Send ``signum`` to ``pid`` (if it is still the process that started at ``start_ticks``)."""
    if start_ticks is not None and not is_running(pid, start_ticks):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


# --------------------------------------------------------------------------------------------
# The shim process


class Shim:
    """Runs one app process in this process group; see the module docstring."""

    def __init__(
        self,
        command: Sequence[str],
        writer: logfile.LogWriter,
        *,
        grace_s: float,
        cwd: Path | None = None,
        confine: Confinement | None = None,
        env_fd: int | None = None,
        disk: bool = False,
    ) -> None:
        self.command = list(command)
        self.env_fd = env_fd
        """The app's env for bubblewrap (``--args``): kept (not inheritable) until the app is
        spawned, handed to it alone, then closed."""
        self.disk = disk
        """Say in the log when the app's disk (the file system of ``cwd``) fills up."""
        self._disk_full = False
        self._disk_checked = 0.0
        self.cwd = cwd
        self.writer = writer
        self.grace_s = grace_s
        self.confine = confine
        self.pid = 0
        self.status: int | None = None
        self.selector = selectors.DefaultSelector()
        self.splitters: dict[int, tuple[str, logfile.LineSplitter]] = {}
        self.stop_signal: int | None = None

    def run(self) -> int:
        close_inherited_fds()
        become_subreaper()
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        self.selector.register(wake_r, selectors.EVENT_READ)
        signal.signal(signal.SIGCHLD, _ignore)
        for signum in _FORWARDED:
            signal.signal(signum, self._forward)
        # Stop signals wait while the app is spawned: delivered after, they reach it too.
        signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        try:
            if self.stop_signal is not None:
                self.writer.system("stopped before the app was started")
                return 128 + self.stop_signal
            if self.cwd is not None:
                os.chdir(self.cwd)
            if self.confine is not None:
                self.confine.enter()
            self._spawn()
        except OSError as exc:
            self.writer.system(f"cannot start {' '.join(self.command)}: {exc.strerror or exc}")
            return 127
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
        while self.status is None:
            self._pump(0.5)
            self._reap()
            self._check_disk()
        # The app is gone. Give its output a moment to arrive (a leftover may still hold the
        # pipes), then stop whatever it left behind.
        self._pump_until(lambda: not self.splitters, within=0.3)
        self._stop_leftovers()
        self._pump_until(lambda: not self.splitters, within=0.5)
        self._flush()
        return self._report_exit(self.status)

    def _spawn(self) -> None:
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [  # no fds but these
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        if self.env_fd is not None:
            os.set_inheritable(self.env_fd, True)
        try:
            self.pid = os.posix_spawnp(
                self.command[0],
                self.command,
                dict(os.environ),
                file_actions=actions,
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, *_FORWARDED),
                setsigmask=(),
            )
        finally:
            os.close(out_w)
            os.close(err_w)
            if self.env_fd is not None:
                os.close(self.env_fd)
                self.env_fd = None
        for fd, stream in ((out_r, "stdout"), (err_r, "stderr")):
            os.set_blocking(fd, False)
            self.splitters[fd] = (stream, logfile.LineSplitter())
            self.selector.register(fd, selectors.EVENT_READ)
        shown = self.command
        if self.confine is not None and "--" in shown:  # the app's command, not the sandbox's
            shown = shown[len(shown) - shown[::-1].index("--") :]
        self.writer.system(f"started pid {self.pid}: {' '.join(shown)}")

    def _check_disk(self) -> None:
        """Every few seconds: a line in the log when the app's disk (the file system of the
        workspace, with its data) becomes full, once until it has room again."""
        now = time.monotonic()
        if not self.disk or now - self._disk_checked < DISK_CHECK_S:
            return
        self._disk_checked = now
        try:
            info = os.statvfs(".")
        except OSError:
            return
        free, size = info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize
        full = free < max(DISK_FULL_BYTES, size // 100)
        if full and not self._disk_full:
            self._disk_full = True
            self.writer.system(
                f"the app's disk is full ({(size - free) >> 20} of {size >> 20} MiB used by its "
                "workspaces and data): its writes fail with ENOSPC (raise "
                "spec.resources.disk_mb, or delete files)"
            )
        elif not full and free > size // 20:  # room again: say it the next time too
            self._disk_full = False

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        """Pass a stop signal on to the whole group once, without receiving it back."""
        self.stop_signal = signum
        if not self.pid:
            return  # nothing to pass it to yet: run() will not start the app
        signal.signal(signum, signal.SIG_IGN)
        try:
            if self.confine is None:
                os.killpg(os.getpgrp(), signum)
            else:
                # Not to the sandbox's own process: it would die at once and take the
                # sandbox down with it (--die-with-parent) before the app could finish.
                me = os.getpid()
                for proc in group_members(os.getpgrp()):
                    if proc.pid not in (me, self.pid):
                        signal_quietly(proc.pid, signum, proc.start_ticks)
        finally:
            signal.signal(signum, self._forward)

    def _pump(self, timeout: float) -> None:
        batch: list[tuple[str, str]] = []
        for key, _ in self.selector.select(timeout):
            fd = int(key.fd)
            if fd not in self.splitters:
                with contextlib.suppress(OSError):
                    while os.read(fd, 4096):  # the wake-up pipe: signals arrived
                        pass
                continue
            stream, splitter = self.splitters[fd]
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                batch.extend((stream, text) for text in splitter.feed(data))
            else:
                batch.extend((stream, text) for text in splitter.flush())
                self._close(fd)
        self.writer.write(batch)

    def _pump_until(self, done: Callable[[], bool], *, within: float) -> None:
        deadline = time.monotonic() + within
        while not done() and (left := deadline - time.monotonic()) > 0:
            self._pump(min(left, 0.1))
            self._reap()

    def _reap(self) -> None:
        """Reap every exited child (the app, and orphans re-parented to this subreaper)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self.status = status

    def _leftovers(self) -> list[ProcStat]:
        me = os.getpid()
        procs = all_procs()
        found = {p.pid: p for p in group_members(os.getpgrp(), procs) if p.pid != me}
        found.update((p.pid, p) for p in descendants(me, procs))
        return list(found.values())

    def _stop_leftovers(self) -> None:
        leftovers = self._leftovers()
        if not leftovers:
            return
        self.writer.system(f"stopping {len(leftovers)} leftover process(es) of the app")
        for proc in leftovers:
            signal_quietly(proc.pid, signal.SIGTERM, proc.start_ticks)
        self._pump_until(lambda: not self._leftovers(), within=self.grace_s)
        for _ in range(3):
            remaining = self._leftovers()
            if not remaining:
                return
            for proc in remaining:
                signal_quietly(proc.pid, signal.SIGKILL, proc.start_ticks)
            self._pump_until(lambda: not self._leftovers(), within=1.0)

    def _flush(self) -> None:
        batch: list[tuple[str, str]] = []
        for fd, (stream, splitter) in list(self.splitters.items()):
            batch.extend((stream, text) for text in splitter.flush())
            self._close(fd)
        self.writer.write(batch)

    def _close(self, fd: int) -> None:
        self.splitters.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fd)
        with contextlib.suppress(OSError):
            os.close(fd)

    def _report_exit(self, status: int | None) -> int:
        code = os.waitstatus_to_exitcode(status) if status is not None else 1
        if self.confine is not None and self.confine.oom_killed():
            self.writer.system(
                "the app was killed by the kernel's out-of-memory killer: it reached its "
                f"memory limit of {self.confine.memory_mb} MiB (raise spec.resources.memory_mb)"
            )
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            self.writer.system(f"pid {self.pid} killed by {name}")
            return 128 - code
        self.writer.system(f"pid {self.pid} exited with code {code}")
        return code


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """A Python-level handler, so that SIGCHLD wakes the selector through the wake-up fd."""


def main(argv: Sequence[str] | None = None) -> int:
    summary = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="appdeck-shim", description=summary)
    parser.add_argument("--log", required=True, type=Path, help="the release's runtime.log")
    parser.add_argument("--instance", required=True, type=int)
    parser.add_argument("--max-bytes", type=int, default=logfile.LOG_MAX_BYTES)
    parser.add_argument("--cwd", type=Path, default=None)
    parser.add_argument("--grace", type=float, default=2.0, help="for leftovers, in seconds")
    parser.add_argument("--netns", action="store_true", help="a loopback-only network")
    parser.add_argument("--netns-fd", type=int, default=None, help="join this network")
    parser.add_argument(
        "--stage",
        nargs=2,
        type=Path,
        action="append",
        default=[],
        metavar=("DIRECTORY", "MOUNT_POINT"),
        help="bind DIRECTORY onto MOUNT_POINT in a mount namespace of the shim's own",
    )
    parser.add_argument("--cgroup-procs", type=Path, action="append", default=[])
    parser.add_argument("--oom-events", type=Path, default=None)
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--env-fd", type=int, default=None, help="the app's env, for bwrap")
    parser.add_argument("--disk", action="store_true", help="log when the workspace fills up")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    if args.env_fd is not None:  # kept past close_inherited_fds, for the app alone
        os.set_inheritable(args.env_fd, False)
    if args.netns_fd is not None:  # the driver made the instance's network: join it first
        _sibling("netns").setns(args.netns_fd)
        os.close(args.netns_fd)
    writer = logfile.LogWriter(args.log, max_bytes=args.max_bytes, instance=args.instance)
    confine = None
    if args.netns or args.cgroup_procs or args.netns_fd is not None or args.stage:
        confine = _sibling("confine").Confinement(
            netns=args.netns,
            cgroup_procs=args.cgroup_procs,
            oom_events=args.oom_events,
            memory_mb=args.memory_mb,
            stage=[(source, target) for source, target in args.stage],
        )
    try:
        shim = Shim(
            command,
            writer,
            grace_s=args.grace,
            cwd=args.cwd,
            confine=confine,
            env_fd=args.env_fd,
            disk=args.disk,
        )
        return shim.run()
    except BaseException:  # noqa: BLE001 - the last resort of the instance's root process
        # A defect in the shim: say so, then take the app down with us rather than leave it
        # running with nobody reading its output.
        traceback.print_exc()
        writer.system("the instance shim failed; stopping the instance")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), signal.SIGKILL)
        return 70


if __name__ == "__main__":
    sys.exit(main())
