"""Disk quotas per app (issue 19): an app's workspaces, database directory and ``/tmp`` hold
at most its ``disk_mb`` (``spec.resources.disk_mb``, else ``APPDECK_APP_DISK_MB``), so a
full app disk never fills the filesystem the platform's data dir is on.

**loop** (the kernel enforces it; root, loop devices, ``mkfs.ext4``): each app has a sparse
ext4 image ``<data dir>/disks/<app>.img`` (0600, root's; the app never sees its bytes), mounted
``nosuid,nodev`` on ``<data dir>/disks/<app>/``, which holds

    releases/<release_id>/src   the release's workspace (every kept release: rollbacks)
    data/                       the app's SQLite directory, bound onto ``<data dir>/appdb/<app>``

and its ``/tmp`` is a tmpfs of the sandbox with a ``size=`` (:func:`split`): the image gets
``disk_mb`` minus that. A write past the end fails with ENOSPC inside the app; the host's
filesystem holds at most the image's size. Mounts live in the host's mount namespace, so
instances adopted after a server restart keep theirs; :meth:`AppDisks.restore` mounts every
image again at start (after a reboot), idempotently. The platform places an app's SQLite
directory on its disk before it opens it (:meth:`AppDisks.place`, given to the apps'
databases when they are opened). A larger ``disk_mb`` grows the image online (``resize2fs``), or
offline while nothing holds it where the host forbids that (no ``CAP_SYS_RESOURCE``); a
smaller one is not applied while the app exists (an ext4 file system only shrinks unmounted):
the build log says so.

**account** (no loop devices, not root, or ``APPDECK_SANDBOX=off``): the same directories stay
on the host's file system; :meth:`AppDisks.usage` walks them (bounded) and the driver stops an
app found over its limit, with a line in its log. **off**: nothing is counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from appdeck.common.errors import Unavailable

log = logging.getLogger("appdeck.runtime.disks")

DiskMode = Literal["loop", "account", "off"]
MIB: Final = 1024 * 1024
MIN_TMP_MB: Final = 16
MAX_TMP_MB: Final = 1024
COMMAND_TIMEOUT_S: Final = 120.0
MAX_WALK_ENTRIES: Final = 200_000
"""The accounting walk stops counting here (and calls the app over its limit)."""


class DiskUnavailable(RuntimeError):
    """The kernel mechanism cannot work on this host; the message says why."""


@dataclass(frozen=True, slots=True)
class Split:
    """How one app's ``disk_mb`` is shared: the image (workspaces, data) and ``/tmp``."""

    image_mb: int
    tmp_mb: int


def split(disk_mb: int) -> Split:
    """A quarter for ``/tmp`` (16 MiB to 1 GiB), the rest for the image."""
    tmp = min(max(disk_mb // 4, MIN_TMP_MB), MAX_TMP_MB)
    return Split(image_mb=disk_mb - tmp, tmp_mb=tmp)


def loop_available() -> str | None:
    """None when loop-mounted images work here, else why not."""
    if os.geteuid() != 0:
        return "the server does not run as root"
    if not Path("/dev/loop-control").exists():
        return "the host has no loop devices (/dev/loop-control)"
    for tool, package in (("mkfs.ext4", "e2fsprogs"), ("resize2fs", "e2fsprogs")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package})"
    if shutil.which("mount") is None or shutil.which("losetup") is None:
        return "mount/losetup are not installed (Debian packages mount, util-linux)"
    return None


def mounts() -> dict[str, str]:
    """Mount points of this mount namespace -> their source (``/proc/self/mountinfo``)."""
    found: dict[str, str] = {}
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, after = left.split(), right.split()
            if len(fields) >= 5 and len(after) >= 2:
                found[_unescape(fields[4])] = _unescape(after[1])
    return found


def unmount_under(prefix: str) -> int:
    """Unmount (lazily) every mount point that starts with ``prefix``, deepest first: for
    tests and scratch directories. How many were."""
    found = sorted((p for p in mounts() if p.startswith(prefix)), key=len, reverse=True)
    for point in found:
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False, timeout=60)
    return len(found)


def _unescape(text: str) -> str:
    return (
        text.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def _run(*argv: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{argv[0]} failed: {exc}") from None
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        raise Unavailable(f"{argv[0]} failed: {reason[-1] if reason else done.returncode}")


class AppDisks:
    """Every app's disk under ``root`` (``<data dir>/disks``); see the module docstring.
    ``appdb``: where the apps' SQLite directories are (``<data dir>/appdb``)."""

    def __init__(
        self,
        root: Path,
        *,
        mode: DiskMode,
        default_mb: int = 1024,
        appdb: Path | None = None,
    ) -> None:
        self.root = Path(root)
        self.mode: DiskMode = mode
        self.default_mb = default_mb
        self.appdb = Path(appdb) if appdb is not None else None
        self.bound: set[int] = set()
        """Apps whose database directory this process saw on their disk."""
        self._deferred: set[int] = set()
        self._locks: dict[int, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    @contextlib.contextmanager
    def _lock(self, app_id: int) -> Iterator[None]:
        """One app's disk is set up or removed by one thread, and one process (replicas on
        one host share the data dir), at a time: no mount stacked on another."""
        with self._locks_lock:
            lock = self._locks.setdefault(int(app_id), threading.Lock())
        with lock:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(
                self.root / f"{int(app_id)}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    @property
    def kernel(self) -> bool:
        return self.mode == "loop"

    def image(self, app_id: int) -> Path:
        return self.root / f"{int(app_id)}.img"

    def mount_point(self, app_id: int) -> Path:
        return self.root / str(int(app_id))

    def release_root(self, app_id: int, release_id: str) -> Path:
        """Where a release's workspace (``src``) lives on the app's disk."""
        return self.mount_point(app_id) / "releases" / release_id

    def limit_mb(self, disk_mb: int | None) -> int:
        return int(disk_mb) if disk_mb else self.default_mb

    # ------------------------------------------------------------------ loop

    def ensure(
        self,
        app_id: int,
        disk_mb: int | None = None,
        *,
        resize: bool = True,
        migrate: bool = False,
    ) -> str | None:
        """The app's disk, created, mounted and as large as ``disk_mb`` asks (idempotent;
        loop mode only; ``resize=False``: an existing image keeps its size). ``migrate``:
        nothing uses the app's database directory (no instance runs), so what it holds from
        before the disk may move onto it (:meth:`_bind_data`). Returns a line for the build
        log when the size was not applied."""
        if not self.kernel:
            return None
        with self._lock(app_id):
            return self._ensure(app_id, disk_mb, resize=resize, migrate=migrate)

    def _ensure(
        self, app_id: int, disk_mb: int | None, *, resize: bool, migrate: bool
    ) -> str | None:
        image_mb = split(self.limit_mb(disk_mb)).image_mb
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        image, point = self.image(app_id), self.mount_point(app_id)
        if not image.exists():
            self._create(image, image_mb)
        point.mkdir(exist_ok=True, mode=0o700)
        self._mount(app_id, migrate=migrate)
        if not resize:
            return None
        return self._resize(app_id, mounts().get(str(point), ""), image_mb)

    def _create(self, image: Path, image_mb: int) -> None:
        partial = image.with_suffix(".new")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, image_mb * MIB)  # sparse: the host holds only what is written
        finally:
            os.close(fd)
        _run(
            "mkfs.ext4",
            "-q",
            "-F",
            "-m",
            "0",
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0",
            str(partial),
        )
        partial.rename(image)

    def _resize(self, app_id: int, device: str, image_mb: int) -> str | None:
        image = self.image(app_id)
        current = image.stat().st_size // MIB
        if image_mb < current:
            return (
                f"the app's disk stays {current} MiB (+ /tmp): disk_mb was lowered, and a disk "
                "never shrinks while its app exists (delete and re-create the app to shrink it)"
            )
        if image_mb == current or not device.startswith("/dev/loop"):
            return None
        _truncate(image, image_mb)
        try:  # online: needs CAP_SYS_RESOURCE, which some hosts (VMs, containers) withhold
            _run("losetup", "--set-capacity", device)
            _run("resize2fs", device)
            return None
        except Unavailable:
            _truncate(image, current)  # the file system still ends there
            _run("losetup", "--set-capacity", device)
        return self._grow_offline(app_id, current, image_mb)

    def _grow_offline(self, app_id: int, current: int, image_mb: int) -> str | None:
        """Grow an unmounted image, when no instance holds it (its mount namespace keeps the
        loop device attached: then the disk is mounted again as it was)."""
        image = self.image(app_id)
        later = (
            f"the app's disk stays {current} MiB (+ /tmp) for now: this host does not let a "
            f"mounted file system grow; it grows to {image_mb} MiB at a deploy while none of "
            "the app's instances runs"
        )
        self.bound.discard(app_id)  # the table tools wait on the app's lock meanwhile
        try:
            self._unmount(app_id, lazy=False)
        except Unavailable:
            self._mount(app_id)
            return later
        if _attached(image, wait_s=3.0):  # still mounted in a running instance's namespace
            self._mount(app_id)
            return later
        _truncate(image, image_mb)
        done = subprocess.run(
            ["e2fsck", "-f", "-y", str(image)],
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if done.returncode <= 1:  # 1: errors corrected
            _run("resize2fs", str(image))
        self._mount(app_id)
        return None if done.returncode <= 1 else later

    def _mount(self, app_id: int, *, migrate: bool = False) -> None:
        point = self.mount_point(app_id)
        mounted = mounts()
        if str(point) not in mounted:
            # mount(8) reuses the loop device still attached to the image, if any
            _run("mount", "-o", "loop,nosuid,nodev,noatime", str(self.image(app_id)), str(point))
            mounted = mounts()
        for name in ("releases", "data"):
            with contextlib.suppress(FileExistsError):
                (point / name).mkdir(mode=0o700)
        self._bind_data(app_id, mounted, migrate=migrate)

    def _unmount(self, app_id: int, *, lazy: bool) -> None:
        mounted = mounts()
        points = [self.mount_point(app_id)]
        if self.appdb is not None:
            points.insert(0, self.appdb / str(int(app_id)))
        for point in points:
            if str(point) in mounted:
                try:
                    _run("umount", str(point))
                except Unavailable:
                    if not lazy:
                        raise
                    _run("umount", "--lazy", str(point))

    def _bind_data(self, app_id: int, mounted: dict[str, str], *, migrate: bool) -> None:
        """The image's ``data`` onto the app's SQLite directory: what the server and the app
        write there is on the app's disk. A directory that already holds files (made before
        this disk existed) is moved onto it first when ``migrate`` and this server has no
        file in it open; else it stays where it is for now (said in the server's log)."""
        if self.appdb is None:
            return
        target = self.appdb / str(int(app_id))
        if str(target) in mounted:
            self.bound.add(app_id)
            return
        self.appdb.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):
            target.mkdir(mode=0o700)
        info = os.lstat(target)
        if not stat.S_ISDIR(info.st_mode):
            raise Unavailable(f"app {app_id}'s database directory is not a directory")
        data = self.mount_point(app_id) / "data"
        with os.scandir(target) as listing:
            filled = any(True for _ in listing)
        if filled:
            if not migrate or _held_open(target):
                if app_id not in self._deferred:  # said once
                    self._deferred.add(app_id)
                    log.warning(
                        "app %s: its database directory stays off its disk until it is not "
                        "in use (a deploy while none of its instances runs, or a restart)",
                        app_id,
                    )
                return
            try:
                _move_contents(target, data, info.st_uid)
            except OSError as exc:  # ENOSPC: the database is larger than the disk
                log.warning("app %s: its database could not move onto its disk: %s", app_id, exc)
                for entry in os.scandir(data):
                    _remove_entry(Path(entry.path))
                return
        os.chown(data, info.st_uid, info.st_gid)
        _run("mount", "--bind", str(data), str(target))
        self.bound.add(app_id)

    def remove(self, app_id: int) -> None:
        """The app is deleted: unmount its data and disk (lazily when busy: the loop device
        goes when the last user lets go), delete the image and the mount point."""
        if not self.kernel:
            return
        with self._lock(app_id):
            self._unmount(app_id, lazy=True)
            self.bound.discard(app_id)
            with contextlib.suppress(OSError):
                self.mount_point(app_id).rmdir()
            self.image(app_id).unlink(missing_ok=True)
            (self.root / f"{int(app_id)}.lock").unlink(missing_ok=True)

    async def place(self, app_id: int) -> None:
        """Before the platform opens the app's SQLite directory (a table tool, a grant): it is
        on the app's disk (made now, at the default size, for an app never deployed). What the
        directory holds from before the disk stays where it is (said in the server's log): only
        the driver knows that no instance of the app runs, so it moves it on a deploy or a
        start (``migrate``)."""
        if not self.kernel or app_id in self.bound:
            return
        await asyncio.to_thread(self.ensure, app_id, resize=False)

    def restore(self) -> int:
        """At start: mount every app's image again (a no-op for those still mounted)."""
        if not self.kernel or not self.root.is_dir():
            return 0
        count = 0
        for image in sorted(self.root.glob("*.img")):
            if image.stem.isdigit():
                try:
                    self.ensure(int(image.stem), resize=False)
                    count += 1
                except Unavailable as exc:
                    log.error("app %s: its disk could not be mounted: %s", image.stem, exc)
        return count

    # ------------------------------------------------------------------ accounting

    def usage(self, paths: list[Path]) -> int:
        """Bytes allocated under ``paths`` (links not followed; bounded: past
        :data:`MAX_WALK_ENTRIES` entries the app is counted as over any limit)."""
        total, entries = 0, 0
        todo = [p for p in paths if p.exists()]
        while todo:
            with contextlib.suppress(OSError), os.scandir(todo.pop()) as listing:
                for entry in listing:
                    entries += 1
                    if entries > MAX_WALK_ENTRIES:
                        return 2**62
                    with contextlib.suppress(OSError):
                        info = entry.stat(follow_symlinks=False)
                        total += info.st_blocks * 512
                        if stat.S_ISDIR(info.st_mode):
                            todo.append(Path(entry.path))
        return total


def _truncate(image: Path, size_mb: int) -> None:
    fd = os.open(image, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, size_mb * MIB)
    finally:
        os.close(fd)


def _attached(image: Path, *, wait_s: float = 0.0) -> bool:
    """Whether a loop device is still attached to ``image`` after ``wait_s`` (the kernel
    detaches an unmounted one asynchronously)."""
    deadline = time.monotonic() + wait_s
    while True:
        done = subprocess.run(
            ["losetup", "--associated", str(image)],
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if done.returncode == 0 and not done.stdout.strip():
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)


def _held_open(directory: Path) -> bool:
    """Whether this process has a file under ``directory`` open."""
    prefix = str(directory) + "/"
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{name}").startswith(prefix):
                    return True
    return False


_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _move_contents(source: Path, dest: Path, uid: int) -> None:
    """Copy what ``source`` holds into ``dest``, owned by ``uid``, then empty ``source``.
    The directory is the app's: every entry is opened relative to its directory's descriptor
    without following a link (a link is copied as a link; a FIFO, socket or device is left
    out), so nothing the app swaps in meanwhile makes root read outside it."""
    src = os.open(source, _DIR_FLAGS)
    try:
        dst = os.open(dest, _DIR_FLAGS)
        try:
            _copy_at(src, dst, uid, depth=0)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    for entry in os.scandir(source):
        _remove_entry(Path(entry.path))


def _copy_at(src: int, dst: int, uid: int, *, depth: int) -> None:
    if depth > 64:
        raise OSError(errno.ELOOP, "the database directory is nested too deep")
    for name in os.listdir(src):
        info = os.stat(name, dir_fd=src, follow_symlinks=False)
        mode = stat.S_IMODE(info.st_mode) & 0o777
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
            os.chown(name, uid, uid, dir_fd=dst, follow_symlinks=False)
        elif stat.S_ISDIR(info.st_mode):
            os.mkdir(name, 0o700, dir_fd=dst)
            inner_src = os.open(name, _DIR_FLAGS, dir_fd=src)
            inner_dst = os.open(name, _DIR_FLAGS, dir_fd=dst)
            try:
                os.fchown(inner_dst, uid, uid)
                os.fchmod(inner_dst, mode)
                _copy_at(inner_src, inner_dst, uid, depth=depth + 1)
            finally:
                os.close(inner_src)
                os.close(inner_dst)
        elif stat.S_ISREG(info.st_mode):
            _copy_file_at(name, src, dst, uid, mode)


def _copy_file_at(name: str, src: int, dst: int, uid: int, mode: int) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    reading = os.open(name, flags, dir_fd=src)
    try:
        if not stat.S_ISREG(os.fstat(reading).st_mode):
            return  # swapped for something else since it was looked at
        out = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dst,
        )
        try:
            while chunk := os.read(reading, 1024 * 1024):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]  # OSError(ENOSPC) past the disk
            os.fchown(out, uid, uid)
            os.fchmod(out, mode)
        finally:
            os.close(out)
    finally:
        os.close(reading)


def _remove_entry(path: Path) -> None:
    """Delete one entry of a directory (a tree without following links: ``rmtree`` works
    through descriptors)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def open_disks(
    root: Path,
    setting: Literal["auto", "loop", "account", "off"],
    *,
    default_mb: int,
    sandboxed: bool,
    appdb: Path | None = None,
) -> AppDisks:
    """The app disks of this host for the ``APPDECK_DISK_QUOTA`` ``setting`` (see the module
    docstring); raises :class:`DiskUnavailable` when ``loop`` was asked for and cannot work."""
    if setting == "off":
        log.warning("apps' disks are NOT limited (APPDECK_DISK_QUOTA=off)")
        return AppDisks(root, mode="off", default_mb=default_mb)
    why = loop_available() if sandboxed else "the app sandbox is off"
    if why is None:
        why = _probe(root)
    if why is None:
        return AppDisks(root, mode="loop", default_mb=default_mb, appdb=appdb)
    if setting == "loop":
        raise DiskUnavailable(
            f"APPDECK_DISK_QUOTA=loop, but loop-mounted app disks do not work here ({why}); "
            "set APPDECK_DISK_QUOTA=account"
        )
    log.warning(
        "apps' disks are limited by accounting only (%s): an app over its limit is stopped "
        "at the next check, but may fill the data dir's file system until then",
        why,
    )
    return AppDisks(root, mode="account", default_mb=default_mb, appdb=appdb)


_PROBED: set[int] = set()
"""The file systems (``st_dev``) on which :func:`_probe` mounted an image in this process."""


def _probe(root: Path) -> str | None:
    """Create, mount and unmount a small image: None when that works here. Whether it does is
    the host's (root, loop devices, ``mkfs.ext4``) and the file system's that holds ``root``:
    one success per file system is remembered for the process (a server probes once per
    start; a test process starts hundreds: issue 26 §3). A failure is never remembered."""
    device = _device_of(root)
    if device is not None and device in _PROBED:
        return None
    probe = AppDisks(root / ".probe", mode="loop", default_mb=MIN_TMP_MB * 4)
    try:
        probe.ensure(0)
    except (Unavailable, OSError) as exc:
        return str(exc)
    finally:
        with contextlib.suppress(Unavailable, OSError):
            probe.remove(0)
        with contextlib.suppress(OSError):
            (root / ".probe").rmdir()
    if device is not None:
        _PROBED.add(device)
    return None


def _device_of(path: Path) -> int | None:
    """The file system ``path`` is (or, not made yet, will be) on: its nearest existing
    ancestor's (``root`` itself exists once the probe ran: the same answer before and after)."""
    for place in (path, *path.parents):
        try:
            return place.stat().st_dev
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return None
