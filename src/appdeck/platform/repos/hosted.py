"""Each app's hosted git repository (issue 21 §4): where ``git push`` over HTTP and inline
files land, read and written only inside the app's sandbox, as the app's uid.

The repository is a bare one at ``<data>/hosted/<app_id>.git``, made and owned by the app's
uid (the server makes the empty folder, chowns it, and ``git init`` runs in the sandbox). Its
parents are the server's private folders: no app process can walk to it; only the sandboxed
git runs of this module see it, bound read-write at ``/app`` (:meth:`Sandbox.wrap`'s
workspace). So what a tenant pushes (a config, links, hooks) is only ever read by git running
as the app's uid with nothing of the host to read. The deploy side reads it as any local
repository, in the sandbox too (:class:`~.local.LocalRepos`, read-only at ``/source``).

Three kinds of run, each with a time limit (the process group is killed) and the app's
sandbox limits for git:

- ``init``: ``git init --bare`` (no templates: no sample hooks).
- ``commit``: ``git fast-import`` of an inline-files stream (:mod:`.inline`) on stdin, parent
  the branch's head read in the same run; a commit whose tree is its parent's is undone (the
  same files twice make no new commit). Its only output is the new head's sha.
- ``serve``: ``git http-backend`` (CGI, smart HTTP only), the request body on stdin, the CGI
  answer on stdout. The CGI variables come from the client (path, query, protocol header):
  they reach bubblewrap in a descriptor (:func:`~appdeck.runtime.sandbox.env_fd`), never the
  environment of the processes that run as root before it.

Bounds: ``receive.maxInputSize`` caps one push's pack, ``RLIMIT_FSIZE`` every file a run
writes, and the service refuses a push to a repository already at its size cap
(:class:`HostedLimits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from appdeck.common.errors import Conflict, InvalidArgument, Unavailable
from appdeck.common.spawn import spawn
from appdeck.platform.repos.local import GIT_LIMITS
from appdeck.runtime.disks import AppDisks
from appdeck.runtime.sandbox import APP_DIR, Sandbox, env_fd, root_env

_PRLIMIT: Final = shutil.which("prlimit", path="/usr/bin:/bin")
MAX_HEADERS: Final = 64 * 1024
"""Bytes of a CGI answer's header block read."""
_CHUNK: Final = 65536
COMMIT_SCRIPT: Final = r"""
branch=$1; header=$2
g() { git -c safe.directory='*' -c core.hooksPath=/dev/null -c gc.auto=0 \
  --git-dir="$GIT_DIR" "$@"; }
parent=$(g rev-parse -q --verify "refs/heads/$branch^{commit}")
{ printf '%s' "$header"; if [ -n "$parent" ]; then printf 'from %s\n' "$parent"; fi; cat; } |
  g fast-import --quiet --done --date-format=raw || exit 80
new=$(g rev-parse -q --verify "refs/heads/$branch^{commit}") || exit 81
if [ -n "$parent" ] && [ "$(g rev-parse "$new^{tree}")" = "$(g rev-parse "$parent^{tree}")" ]; then
  g update-ref "refs/heads/$branch" "$parent" "$new" || exit 81
  new=$parent
fi
printf '%s\n' "$new"
"""
"""Run as ``bash -c SCRIPT appdeck-commit <branch> <commit header>``, the changes on stdin."""
MAX_REFS: Final = 100
"""Refs one push may update."""
MAX_REF: Final = 200
"""Characters of a pushed ref's name."""
PRE_RECEIVE: Final = rf"""#!/bin/sh
n=0
while read -r old new ref; do
  n=$((n + 1))
  if [ "$n" -gt {MAX_REFS} ]; then
    echo "refused: more than {MAX_REFS} refs in one push" >&2; exit 1
  fi
  if [ "${{#ref}}" -gt {MAX_REF} ]; then
    echo "refused: a ref name longer than {MAX_REF} characters" >&2; exit 1
  fi
  case $ref in
    refs/heads/*|refs/tags/*) ;;
    *) echo "refused: $ref: only branches and tags may be pushed" >&2; exit 1 ;;
  esac
done
echo "AppDeck: a push to the app's connected branch is tested (CI) or deployed (auto_deploy)" >&2
echo "AppDeck: next; list_deployments follows it" >&2
"""
"""The push's ref rule, run by receive-pack before any ref moves (in the sandbox, as the
app's uid): branches and tags only, at most :data:`MAX_REFS` of them, names at most
:data:`MAX_REF` characters (git's own ``check-ref-format`` rules apply first)."""
SERVE_SCRIPT: Final = r"""
d=$(mktemp -d) || exit 1
printf '%s' "$APPDECK_PRE_RECEIVE" > "$d/pre-receive" && chmod 700 "$d/pre-receive" || exit 1
git -c core.hooksPath="$d" http-backend
code=$?
rm -rf "$d"
exit $code
"""
"""A push's ``git http-backend``, with :data:`PRE_RECEIVE` as its only hook (a private
folder of the run: the sandbox's own ``/tmp``)."""


@dataclass(frozen=True, slots=True)
class HostedLimits:
    max_push_bytes: int = 100 << 20
    """Bytes of one push's request body (and of its pack: ``receive.maxInputSize``)."""
    max_repo_bytes: int = 500 << 20
    """A push to a repository this large or larger is refused."""
    timeout_s: float = 120.0
    """One request (or commit) from start to end."""
    max_pushes_per_app: int = 1
    """Pushes under way at once to one app's repository (on this replica)."""


class Run:
    """One sandboxed git process: stdin, stdout, and the clean-up that must follow."""

    def __init__(self, proc: asyncio.subprocess.Process, done: list[object]) -> None:
        self.proc = proc
        self._done = done

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def close(self) -> int:
        """Wait for (or kill) the process, remove its cgroup; its exit status."""
        if self.proc.returncode is None:
            try:
                async with asyncio.timeout(5):
                    await self.proc.wait()
            except TimeoutError:
                self.kill()
                async with asyncio.timeout(5):
                    await self.proc.wait()
        for cleanup in self._done:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(cleanup)  # type: ignore[arg-type]
        self._done.clear()
        return self.proc.returncode if self.proc.returncode is not None else -1


class HostedRepos:
    def __init__(
        self,
        root: Path,
        sandbox: Sandbox | None,
        limits: HostedLimits,
        *,
        disks: AppDisks | None = None,
    ) -> None:
        """``root``: the folder of the hosted repositories (the server's, 0700). ``disks``:
        the apps' disks; in ``loop`` mode each repository lives on its app's disk
        (``<data>/disks/<app>/hosted.git``), so its bytes count against the app's disk quota
        and a push that would overfill it fails there (ENOSPC), not on the host."""
        self._root = root
        self.sandbox = sandbox
        self.limits = limits
        self._disks = disks if disks is not None and disks.kernel else None

    def path(self, app_id: int) -> Path:
        if self._disks is not None:
            return self._disks.mount_point(app_id).absolute() / "hosted.git"
        return (self._root / f"{app_id}.git").absolute()

    def exists(self, app_id: int) -> bool:
        return (self.path(app_id) / "HEAD").is_file()

    def remove(self, app_id: int) -> None:
        """Drop the app's repository (app deleted). ``rmtree`` follows no link."""
        shutil.rmtree(self.path(app_id), ignore_errors=True)

    def size(self, app_id: int) -> int:
        """Bytes of the repository's files (sizes only: nothing of them is read)."""
        total = 0
        for folder, _, names in os.walk(self.path(app_id)):
            for name in names:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(folder, name)).st_size
        return total

    async def ensure(self, app_id: int) -> Path:
        """The app's repository, made (owned by the app's uid, in its sandbox) if missing."""
        repo = self.path(app_id)
        if self._disks is not None:  # mounted (made at the default size if it is new)
            await asyncio.to_thread(self._disks.ensure, app_id, resize=False)
        if self.exists(app_id):
            return repo
        repo.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        repo.mkdir(mode=0o700, exist_ok=True)
        if self.sandbox is not None:
            uid = self.sandbox.uid_for(app_id)
            os.chown(repo, uid, uid)
        argv = ["git", "-c", "init.defaultBranch=main", "init", "--bare", "-q", "--template="]
        run = await self._start(app_id, [*argv, self._inside(app_id)], {})
        code, _, _ = await self._communicate(run, b"")
        if code != 0:
            raise Unavailable("the app's hosted repository could not be made")
        return repo

    async def commit(self, app_id: int, branch: str, header: bytes, changes: bytes) -> str:
        """Commit ``changes`` (a fast-import stream's body, :mod:`.inline`) on ``branch``
        with ``header``; the branch's head after it (the parent when nothing changed)."""
        await self.ensure(app_id)
        argv = ["/bin/bash", "--noprofile", "--norc", "-c", COMMIT_SCRIPT, "appdeck-commit"]
        env = {"GIT_DIR": self._inside(app_id)}
        run = await self._start(app_id, [*argv, branch, header.decode("utf-8")], env)
        code, out, _ = await self._communicate(run, changes)
        sha = out.decode("ascii", "replace").strip()
        if code == 80:
            raise Conflict(
                "the files could not be committed: the branch moved meanwhile (a push?)",
                hint="call again: the files are committed on top of the new head",
            )
        if code != 0 or len(sha) not in (40, 64):
            raise Unavailable("the files could not be committed to the app's hosted repository")
        return sha

    async def serve(self, app_id: int, cgi: Mapping[str, str], *, write: bool) -> Run:
        """Start ``git http-backend`` for one request (its CGI variables in ``cgi``): the
        caller pumps the body into ``stdin`` and reads the answer (:func:`cgi_head`)."""
        limit = self.limits.max_push_bytes
        config = {
            "safe.directory": "*",
            "core.hooksPath": "/dev/null",
            "http.receivepack": "true" if write else "false",
            "http.getanyfile": "false",
            "receive.maxInputSize": str(limit),
            "receive.fsckObjects": "true",
            "receive.autogc": "false",
            "gc.auto": "0",
            "uploadpack.allowAnySHA1InWant": "false",
        }
        env = dict(cgi)
        env["GIT_PROJECT_ROOT"] = self._inside(app_id)
        env["GIT_HTTP_EXPORT_ALL"] = "1"
        env["GIT_CONFIG_COUNT"] = str(len(config))
        for index, (key, value) in enumerate(config.items()):
            env[f"GIT_CONFIG_KEY_{index}"] = key
            env[f"GIT_CONFIG_VALUE_{index}"] = value
        if not write:
            return await self._start(app_id, ["git", "http-backend"], env)
        env["APPDECK_PRE_RECEIVE"] = PRE_RECEIVE
        bash = ["/bin/bash", "--noprofile", "--norc", "-c", SERVE_SCRIPT, "appdeck-serve"]
        return await self._start(app_id, bash, env)

    # -- running in the sandbox ---------------------------------------------------------

    def _inside(self, app_id: int) -> str:
        """The repository's path as the sandboxed git sees it."""
        return APP_DIR if self.sandbox is not None else str(self.path(app_id))

    async def _start(self, app_id: int, argv: list[str], extra: Mapping[str, str]) -> Run:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": "/nonexistent",
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_NO_REPLACE_OBJECTS": "1",
            **extra,
        }
        cap: list[str] = []
        if _PRLIMIT is not None:  # no file a run writes grows past a push's limit
            size = self.limits.max_push_bytes + (1 << 20)
            cap = [_PRLIMIT, f"--fsize={size}:{size}", "--"]
        sandbox = self.sandbox
        if sandbox is None:  # one-tenant development: git as the server's user, on the path
            proc = await _spawn([*cap, *argv], env, (), self.path(app_id))
            return Run(proc, [])
        key = f"{app_id}-hosted{secrets.token_hex(4)}"
        done: list[object] = []
        procs: tuple[Path, ...] = ()
        if sandbox.cgroups is not None:
            cgroups = sandbox.cgroups
            procs = (await asyncio.to_thread(cgroups.create, key, GIT_LIMITS)).procs
            done.append(lambda: cgroups.remove(key))
        fd = env_fd(env)
        try:
            wrapped = sandbox.wrap(
                argv,
                app_id=app_id,
                own_network=True,
                workspace=self.path(app_id),
                limits=GIT_LIMITS,
                cgroup_procs=procs,
                env_fd=fd,
            )
            proc = await _spawn([*cap, *wrapped], root_env(), (fd,), None)
        except BaseException:
            for cleanup in done:
                with contextlib.suppress(OSError):
                    cleanup()  # type: ignore[operator]
            raise
        finally:
            os.close(fd)
        return Run(proc, done)

    async def _communicate(self, run: Run, data: bytes) -> tuple[int, bytes, bytes]:
        """Feed ``data``, read the (small) output, within the time limit."""
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                out, err = await run.proc.communicate(data)
        except TimeoutError:
            run.kill()
            await run.close()
            raise Unavailable(
                f"git on the app's hosted repository took over {self.limits.timeout_s:g} s"
            ) from None
        return await run.close(), out[: 1 << 16], (err or b"")[: 1 << 16]


async def _spawn(
    argv: list[str], env: dict[str, str], fds: tuple[int, ...], cwd: Path | None
) -> asyncio.subprocess.Process:
    """stderr is dropped: git's words quote the tenant's files (and an unread pipe would
    stall a long run); a failure is said in the platform's words."""
    return await spawn(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        pass_fds=fds,
    )


@dataclass(frozen=True, slots=True)
class CgiHead:
    status: int
    headers: list[tuple[str, str]]
    rest: bytes
    """What of the body came with the headers."""


_PASSED: Final = frozenset({"content-type", "cache-control", "expires", "pragma"})


async def cgi_head(stdout: asyncio.StreamReader) -> CgiHead:
    """The CGI answer's status and headers (only those a git client needs are kept);
    :class:`InvalidArgument` when there is none within :data:`MAX_HEADERS` bytes."""
    buffer = b""
    while True:
        for mark in (b"\r\n\r\n", b"\n\n"):
            at = buffer.find(mark)
            if at >= 0:
                return _parsed(buffer[:at], buffer[at + len(mark) :])
        if len(buffer) > MAX_HEADERS:
            raise InvalidArgument("git http-backend answered no headers")
        chunk = await stdout.read(_CHUNK)
        if not chunk:
            if not buffer:
                raise InvalidArgument("git http-backend answered nothing")
            return _parsed(buffer, b"")
        buffer += chunk


def _parsed(block: bytes, rest: bytes) -> CgiHead:
    status = 200
    headers = []
    for line in block.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "status":
            code = value.split(" ", 1)[0]
            status = int(code) if code.isdigit() and 100 <= int(code) <= 599 else 502
        elif name in _PASSED and value.isprintable():
            headers.append((name, value))
    return CgiHead(status, headers, rest)


async def body_of(run: Run, first: bytes) -> AsyncIterator[bytes]:
    """The rest of the CGI answer, as it comes."""
    if first:
        yield first
    assert run.proc.stdout is not None
    while chunk := await run.proc.stdout.read(_CHUNK):
        yield chunk
