"""The sandbox every build step, source copy and instance of an app runs in.

App code is hostile until proven otherwise. Each command of an app runs as

    setpriv --reuid U --regid U --clear-groups --inh-caps=-all --no-new-privs \\
      bwrap --unshare-user --uid U --gid U --disable-userns --unshare-pid --unshare-ipc \\
            --unshare-uts --unshare-cgroup-try [--unshare-net] --die-with-parent \\
            --ro-bind /usr /usr ... --ro-bind-try /etc/<a few files> ... \\
            --proc /proc --dev /dev --tmpfs /tmp --bind <workspace> /app --chdir /app -- <command>

- **Its own uid** (:meth:`Sandbox.uid_for`: ``uid_base + app_id``, in its install's range:
  :mod:`.install`), which owns nothing on
  the host but the app's workspace: the server's files (data dir, keys, database) and other
  apps' files are out of reach even if they were mounted; it cannot signal the server or any
  other app. It is dropped *before* bubblewrap runs, so nothing runs as root in the sandbox.
- **Its own PID, IPC, UTS and mount namespaces**: it sees its own processes only, a read-only
  ``/usr``, a handful of ``/etc`` files (no shadow, no keys), a private ``/proc`` and ``/tmp``,
  and its workspace at ``/app``, the only writable place.
- **Its own network namespace** holding only ``lo``: an instance's is created by its shim (see
  :mod:`appdeck.runtime.netns`; the ingress and the health checks reach into it); a build
  step's by bubblewrap (``--unshare-net``).
- **A cleared environment**: the driver builds it (:meth:`DriverCore._env`); nothing of the
  server's own environment but locale and paths passes.
- **Limits** through cgroups (:mod:`.cgroups`), or rlimits where the host has none writable.
- ``--die-with-parent``: when its shim (or, for a build, the server) dies, the sandbox and
  everything in its PID namespace die with it, whatever it forked or however it daemonised.

bubblewrap adds no measurable start-up time (``bench/sandbox.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from appdeck.common.errors import FailedPrecondition
from appdeck.runtime.appdb import DATA_DIR
from appdeck.runtime.cgroups import Cgroups, Limits

APP_DIR: Final = "/app"
"""Where the workspace is, inside the sandbox."""
STAGE: Final = Path("/run/appdeck-sandbox")
"""The default stage: mount points (``app``, ``source``, ``data``) that each sandbox, in a mount
namespace of its own, binds its workspace and source onto before bubblewrap takes them (see
:meth:`Sandbox.wrap`). A server's sandbox has its install's own (``/run/appdeck/<id>``)."""
_STAGE_SCRIPT: Final = (
    'for procs in $3; do echo $$ > "$procs" || exit 126; done\n'
    'mount --bind "$1" "$4/app" || exit 126\n'
    'if [ -n "$2" ]; then mount --bind "$2" "$4/source" || exit 126; eval "exec ${2##*/}<&-"; fi\n'
    "shift 4\n"
    'exec "$@"\n'
)
"""Run as root before the sandbox: join the cgroups named in $3 (space-separated ``cgroup.procs``
files: a build's; an instance's shim joins its own), then bind the workspace ($1) and source
($2, ``/proc/self/fd/N``) onto the mount points of the stage ($4), and close the source's
descriptor: an open directory handed into the sandbox is a way out of it (``..`` from it).
bash, not sh: dash closes no descriptor numbered 10 or more."""
SANDBOX_PATH: Final = (
    f"{APP_DIR}/.venv/bin:{APP_DIR}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"
)
ETC_FILES: Final = (
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/python3",
    "/etc/python3.11",
)
"""The only files of the host's ``/etc`` a sandbox sees: name service, TLS roots, locale."""
MAX_UID: Final = 2**31 - 2


ROOT_PATH: Final = "/usr/sbin:/usr/bin:/sbin:/bin"


def root_env() -> dict[str, str]:
    """The environment of what runs as root before the sandbox takes over (``nsenter``,
    ``unshare``, the stage script, ``prlimit``, ``setpriv``; an instance's shim): the
    platform's, never the app's. An app's env reaching a root process is root code execution:
    ``LD_PRELOAD`` naming a library in the app's source, or ``PATH`` leading to a ``mount``
    of its own. The app's env goes to bubblewrap in a descriptor instead (:func:`env_fd`)."""
    env = {name: os.environ[name] for name in ("LANG", "LC_ALL") if name in os.environ}
    env["PATH"] = ROOT_PATH
    return env


def env_fd(env: Mapping[str, str]) -> int:
    """A descriptor (a memfd, close-on-exec: pass it explicitly) holding bubblewrap's
    ``--clearenv`` and a ``--setenv NAME VALUE`` per variable, NUL-separated, for
    :meth:`Sandbox.wrap`'s ``env_fd`` (``bwrap --args``): the values never appear on a
    command line, and no process before the sandbox sees them in its environment."""
    parts = [b"--clearenv"]
    for name, value in env.items():
        parts += [b"--setenv", os.fsencode(name), os.fsencode(value)]
    data = memoryview(b"\0".join(parts) + b"\0")
    fd = os.memfd_create("appdeck-env", os.MFD_CLOEXEC)
    try:
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _system_binds() -> list[str]:
    """bubblewrap's binds of the host's system, read-only: ``/usr`` (with the merged-``/usr``
    links), and a whitelist of ``/etc`` files."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        target = os.readlink(f"/{name}") if os.path.islink(f"/{name}") else None
        if target is not None:
            argv += ["--symlink", target, f"/{name}"]
        elif os.path.isdir(f"/{name}"):
            argv += ["--ro-bind", f"/{name}", f"/{name}"]
    for path in ETC_FILES:
        argv += ["--ro-bind-try", path, path]
    return argv


class SandboxUnavailable(RuntimeError):
    """The host cannot sandbox apps; the message says what to install or set."""


class NoSandboxUid(FailedPrecondition, ValueError):
    """The app's id is past its install's uid range."""


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How to confine an app's commands on this host (see the module docstring)."""

    uid_base: int = 200_000
    uid_count: int = MAX_UID
    """App ids below it have a uid (an install's range: :data:`.install.UID_COUNT`)."""
    stage: Path = STAGE
    bwrap: str = "bwrap"
    setpriv: str = "setpriv"
    cgroups: Cgroups | None = None
    """None: limits fall back to rlimits (weaker; said at start-up)."""
    defaults: Limits = field(default_factory=Limits)

    def uid_for(self, app_id: int) -> int:
        uid = self.uid_base + app_id
        if not 0 <= app_id < self.uid_count or not 0 < uid <= MAX_UID:
            last = min(self.uid_count - 1, MAX_UID - self.uid_base)
            raise NoSandboxUid(
                f"app {app_id} has no sandbox uid: this install's range gives apps 0-{last} "
                f"a uid each (uids from {self.uid_base})",
                hint="register apps on another install, or see docs/sandbox.md on uid ranges",
            )
        return uid

    def wrap(
        self,
        command: Sequence[str],
        *,
        app_id: int,
        own_network: bool,
        workspace: Path,
        source_fd: int | None = None,
        limits: Limits | None = None,
        cgroup_procs: Sequence[Path] = (),
        staged: bool = False,
        data: bool = False,
        env_fd: int | None = None,
        tmp_mb: int | None = None,
    ) -> list[str]:
        """``command`` confined, with ``workspace`` at ``/app`` (and the directory open on
        ``source_fd`` in the process that runs the argv, read-only at ``/source``).
        ``own_network``: bubblewrap makes a loopback-only namespace (for builds; an
        instance's shim makes its own first, which the platform can then reach it in).

        bubblewrap runs as the app's uid, which may not traverse the server's private
        directories to the workspace; so the argv starts, as root, in a mount namespace of
        its own where the workspace (and source) are bound onto its stage's mount points,
        which it can reach. The source is bound from its descriptor (``/proc/self/fd/N``),
        so exactly the directory the platform checked and opened is what the copy sees.
        ``staged``: the caller (an instance's shim) did that binding itself already.
        ``data``: the app's database directory, which the shim bound onto the stage's
        ``data`` point, is bound read-write at :data:`~.appdb.DATA_DIR` (instances only).
        ``env_fd``: the command's environment (see :func:`env_fd`), read by bubblewrap: the
        argv runs as root until ``setpriv`` and must be spawned with :func:`root_env`.
        ``tmp_mb``: the size of ``/tmp`` (the app's disk quota's share, :mod:`.disks`)."""
        uid = str(self.uid_for(app_id))
        source = f"/proc/self/fd/{source_fd}" if source_fd is not None else ""
        argv: list[str] = []
        if not staged:  # bind the workspace (and source) onto the stage, as root, first
            argv += [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "/bin/bash",
                "-c",
                _STAGE_SCRIPT,
                "appdeck-stage",
                str(workspace),
                source,
                " ".join(str(path) for path in cgroup_procs),
                str(self.stage),
            ]
        if self.cgroups is None:
            limits = limits or self.defaults
            argv += [
                "prlimit",
                f"--as={limits.memory_mb * 1024 * 1024}",
                f"--nproc={limits.pids}",
                "--",
            ]
        argv += [
            self.setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--no-new-privs",
            self.bwrap,
            "--unshare-user",
            "--uid",
            uid,
            "--gid",
            uid,
            "--disable-userns",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--hostname",
            "app",
        ]
        if env_fd is not None:
            argv += ["--args", str(env_fd)]
        if own_network:
            argv.append("--unshare-net")
        argv += _system_binds()
        argv += ["--proc", "/proc", "--dev", "/dev"]
        if tmp_mb is not None:  # a full /tmp fails the app's writes with ENOSPC
            argv += ["--size", str(tmp_mb * 1024 * 1024)]
        argv += ["--tmpfs", "/tmp"]  # noqa: S108
        argv += ["--bind", str(self.stage / "app"), APP_DIR]
        if source_fd is not None:
            argv += ["--ro-bind", str(self.stage / "source"), "/source"]
        if data:
            argv += ["--bind", str(self.stage / "data"), DATA_DIR]
        argv += ["--remount-ro", "/", "--chdir", APP_DIR, "--", *command]
        return argv

    def check(self) -> None:
        """Run a confined ``true``: raise :class:`SandboxUnavailable` saying what is missing."""
        require_root()
        for tool, package in ((self.bwrap, "bubblewrap"), (self.setpriv, "util-linux")):
            if shutil.which(tool) is None:
                raise SandboxUnavailable(
                    f"sandboxing apps needs {tool}: install the Debian package {package} "
                    "(apt-get install bubblewrap), or set APPDECK_SANDBOX=off on a one-tenant "
                    "dev machine"
                )
        try:
            for point in ("app", "source", "data"):
                (self.stage / point).mkdir(parents=True, exist_ok=True, mode=0o755)
            self.stage.chmod(0o755)  # the app's uid walks through it (whatever the umask)
            if self._confined_by() in _CONFINED_TRUE_RAN:
                return
            with tempfile.TemporaryDirectory() as probe:
                os.chown(probe, self.uid_for(0), self.uid_for(0))
                argv = self.wrap(
                    ["/usr/bin/true"], app_id=0, own_network=True, workspace=Path(probe)
                )
                done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"the sandbox does not start: {exc}") from None
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxUnavailable(
                "the sandbox does not start on this host ("
                + (reason[-1] if reason else f"exit {done.returncode}")
                + "): user namespaces may be disabled; set APPDECK_SANDBOX=off on a one-tenant "
                "dev machine"
            )
        _CONFINED_TRUE_RAN.add(self._confined_by())

    def _confined_by(self) -> tuple[str, str, Path]:
        """What a confined ``true`` starting depends on beyond the host's kernel: the two
        programs and the directory the stages are in (an app's uid walks through it)."""
        return self.bwrap, self.setpriv, self.stage.parent


_CONFINED_TRUE_RAN: set[tuple[str, str, Path]] = set()
"""Where :meth:`Sandbox.check` saw a confined ``true`` exit 0 in this process
(:meth:`Sandbox._confined_by`). Whether one starts is the host's (user namespaces, bubblewrap,
setpriv, the path down to the stages), not an install's: one success per process answers for
every later check there, whose stage directories are still made and opened each time. A
failure is never remembered: the next check runs it again. A server checks once per start; a
test process starts hundreds of servers (issue 26 §3)."""


def require_root() -> None:
    """Raise :class:`SandboxUnavailable` unless this process may sandbox apps (root)."""
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "sandboxing apps needs root (to run each app as a uid of its own); "
            "run the server as root, or set APPDECK_SANDBOX=off on a one-tenant dev machine"
        )


def detect(
    uid_base: int = 200_000,
    cgroup: str = "appdeck",
    *,
    uid_count: int = MAX_UID,
    stage: Path = STAGE,
) -> Sandbox:
    """The sandbox of this host (cgroups found under ``cgroup``, or None for the rlimit
    fallback); raises :class:`SandboxUnavailable` when apps cannot be sandboxed here. A
    server passes its install's range, cgroup and stage (:mod:`.install`)."""
    sandbox = Sandbox(
        uid_base=uid_base, uid_count=uid_count, stage=stage, cgroups=Cgroups.detect(name=cgroup)
    )
    sandbox.check()
    return sandbox
