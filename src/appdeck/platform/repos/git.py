"""The git CLI, run so that a repository (and whoever controls its URL) cannot reach further.

Every run: a clean environment (no ``HOME`` config, no system or global config, no credential
helpers, ``GIT_TERMINAL_PROMPT=0``), transports limited to https and file
(``protocol.allow=never`` plus one ``always`` each; ``ext::``, ``fd::`` and ``git://`` never
run), an https host checked against the egress rule and git pinned to the checked address
(:mod:`.reach`) before every network run, hooks off, redirects off, a time limit (the whole
process group is killed), stdout and stderr bounded. A token travels in the environment
(``GIT_CONFIG_*``: ``http.extraHeader``), never on the command line or in a URL, and is
scrubbed from anything git prints.

A checkout is ``git archive <sha>`` from the app's bare cache (``<data>/repos/<app>.git``),
extracted by :mod:`tarfile` with the ``data`` filter (no absolute paths, no link or member
leading out, no devices, no set-uid bits) under a byte and a file limit, into a fresh directory
renamed into place: the release's source, which the runtime then copies in the sandbox.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import resource
import shutil
import signal
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, Final
from urllib.parse import urlsplit

from appdeck.common.errors import FailedPrecondition, InvalidArgument, Unavailable
from appdeck.common.spawn import spawn
from appdeck.platform.repos import reach
from appdeck.platform.repos.local import (
    MISSING_BRANCH,
    NOT_ON_BRANCH,
    LocalRepos,
    refuse_foreign_commit,
    refuse_missing_branch,
)
from appdeck.runtime.egress import EgressPolicy
from appdeck.runtime.sandbox import Sandbox

SHA: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
BRANCH: Final = re.compile(r"(?!/|.*(?:\.\.|//|@\{|\.lock$|/$|\.$))[A-Za-z0-9._/-]{1,200}")
_SAFE: Final = (
    "-c", "protocol.allow=never",
    "-c", "protocol.https.allow=always",
    "-c", "protocol.file.allow=always",
    "-c", "credential.helper=",
    "-c", "core.hooksPath=/dev/null",
    "-c", "http.followRedirects=false",
    "-c", "core.askPass=",
    "-c", "transfer.fsckObjects=true",
)  # fmt: skip


_PRLIMIT: Final = shutil.which("prlimit", path="/usr/bin:/bin")


@dataclass(frozen=True, slots=True)
class Limits:
    timeout_s: float = 60.0
    max_output: int = 1 << 20
    """Bytes of ls-remote / log output read."""
    max_bytes: int = 200 << 20
    """Bytes of a checkout (the archive)."""
    max_files: int = 20_000
    max_cache_bytes: int = 500 << 20
    """Bytes of the app's bare cache after a fetch (over it: dropped, the deploy refused)."""


@dataclass(frozen=True, slots=True)
class Remote:
    """Where git fetches from: a URL or checked local path, and the token (plain, in memory)."""

    target: str
    token: str | None = None


@dataclass(frozen=True, slots=True)
class Heads:
    default: str | None
    branches: dict[str, str]  # name -> sha


@dataclass(frozen=True, slots=True)
class Commit:
    sha: str
    message: str


class GitError(Exception):
    """git failed. ``reason`` is the platform's own words (what a caller may be told);
    ``output`` is what git printed, masked and bounded: attacker input, for the log only."""

    def __init__(self, reason: str, *, output: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.output = output


class Git:
    def __init__(
        self,
        cache_dir: Path,
        limits: Limits | None = None,
        *,
        policy: EgressPolicy | None = None,
        resolve: reach.Resolve = reach.system_resolve,
        ca_file: Path | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        """``policy`` decides where git may connect (tests allow one loopback port with its
        ``extra_allowed``); ``ca_file``, when given, is the only CA git trusts for https (tests:
        the loopback server's own CA; never a setting users reach). ``sandbox``: the apps'
        sandbox, which git on a local repository runs in (:mod:`.local`)."""
        self._cache = cache_dir
        self.local = LocalRepos(cache_dir / ".sandbox", sandbox)
        self.limits = limits or Limits()
        self.policy = policy or EgressPolicy()
        self._resolve = resolve
        self._tls = ("-c", f"http.sslCAInfo={ca_file}") if ca_file is not None else ()

    async def _reach(self, remote: Remote) -> list[str]:
        """The options that pin git to a checked address of the remote's host (none for a
        local path); refused before git runs when the host is not allowed."""
        if _is_local(remote):
            return []
        if urlsplit(remote.target).scheme.lower() != "https":
            raise InvalidArgument("git fetches over https or from a local path only")
        return await reach.pin(remote.target, self.policy, self._resolve)

    # -- running ------------------------------------------------------------------------

    def _env(self, token: str | None) -> dict[str, str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": "/nonexistent",
            "LC_ALL": "C",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "/bin/false",
            "SSH_ASKPASS": "/bin/false",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_ALLOW_PROTOCOL": "https:file",
            "GIT_NO_REPLACE_OBJECTS": "1",
        }
        if token is not None:
            basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
            env |= {
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
            }
        return env

    async def run(
        self,
        args: Sequence[str],
        *,
        token: str | None = None,
        cwd: Path | None = None,
        sink: BinaryIO | None = None,
        max_output: int | None = None,
        max_file: int | None = None,
    ) -> str:
        """Run ``git <safe options> args``; its stdout (bounded) or :class:`GitError`. With
        ``sink``, stdout is written there instead (still bounded) and ``""`` returned. With
        ``max_file``, no file git writes may grow past it (``RLIMIT_FSIZE``)."""
        capped: tuple[str, ...] = ()
        if max_file is not None and _PRLIMIT is not None:  # util-linux: no code after fork
            capped = (_PRLIMIT, f"--fsize={max_file}:{max_file}", "--")
        code, out, err = await execute(
            [*capped, "git", *_SAFE, *self._tls, *args],
            env=self._env(token),
            timeout_s=self.limits.timeout_s,
            limit=max_output or self.limits.max_output,
            cwd=cwd,
            sink=sink,
            preexec=None if max_file is None or capped else partial(_cap_files, max_file),
        )
        if code != 0:
            if max_file is not None and (code == -signal.SIGXFSZ or b"File too large" in err):
                raise GitError(f"git wrote a file over {max_file} bytes")
            raise GitError(_reason(err), output=masked(err, token))
        return out.decode("utf-8", "replace")

    # -- what a remote has --------------------------------------------------------------

    async def heads(self, remote: Remote, app_id: int = 0) -> Heads:
        """The remote's branches; a local repository's are read in app ``app_id``'s sandbox."""
        if _is_local(remote):
            return _heads(await self._local(app_id, remote, "heads"))
        out = await self.run(
            [
                *await self._reach(remote),
                "ls-remote",
                "--symref",
                "--",
                remote.target,
                "HEAD",
                "refs/heads/*",
            ],
            token=remote.token,
        )
        return _heads(out)

    async def _local(
        self,
        app_id: int,
        remote: Remote,
        op: str,
        *args: str,
        sink: BinaryIO | None = None,
        max_output: int | None = None,
    ) -> str:
        """:data:`.local.SCRIPT`'s ``op`` on a local repository, in the app's sandbox."""

        async def execute_bound(
            argv: list[str], env: dict[str, str], fds: tuple[int, ...], to: BinaryIO | None
        ) -> tuple[int, bytes, bytes]:
            return await execute(
                argv,
                env=env,
                timeout_s=self.limits.timeout_s,
                limit=max_output or self.limits.max_output,
                sink=to,
                pass_fds=fds,
            )

        done = await self.local.run(
            app_id, Path(remote.target), op, args, env=self._env(None), execute=execute_bound,
            sink=sink,
        )  # fmt: skip
        if done.code == MISSING_BRANCH:
            raise refuse_missing_branch(args[0])
        if done.code == NOT_ON_BRANCH:
            raise refuse_foreign_commit(args[1])
        if done.code != 0:
            raise GitError("git could not read the repository", output=masked(done.err))
        return done.out.decode("utf-8", "replace")

    async def resolve(self, app_id: int, remote: Remote, branch: str, sha: str | None) -> Commit:
        """The commit ``sha`` (default: the branch's head) with its message: fetched into the
        app's cache from a URL; read in the app's sandbox from a local repository, where a
        commit not on ``branch`` is refused."""
        if _is_local(remote):
            out = await self._local(app_id, remote, "resolve", branch, sha or "")
            full, _, message = out.partition("\x00")
            return Commit(full.strip(), message.strip()[:2000])
        head = await self.fetch(app_id, remote, branch)
        return await self.commit(app_id, sha or head)

    # -- checkouts ----------------------------------------------------------------------

    def _bare(self, app_id: int) -> Path:
        return self._cache / f"{app_id}.git"

    def forget(self, app_id: int) -> None:
        """Drop the app's cache and checkouts (on connect, disconnect and app delete: an app
        id SQLite hands out again must not find another repository's objects)."""
        shutil.rmtree(self._bare(app_id), ignore_errors=True)
        shutil.rmtree(self._cache / str(app_id), ignore_errors=True)

    async def fetch(self, app_id: int, remote: Remote, branch: str) -> str:
        """Fetch ``branch`` into the app's bare cache; the sha it points at."""
        bare = self._bare(app_id)
        if not (bare / "HEAD").is_file():
            shutil.rmtree(bare, ignore_errors=True)
            self._cache.mkdir(parents=True, exist_ok=True, mode=0o700)
            await self.run(["init", "--bare", "-q", "--template=", "--", str(bare)])
        ref = f"refs/appdeck/{branch}"
        pinned = await self._reach(remote)
        cap = self.limits.max_cache_bytes
        try:  # the pack is kept whole (one file, capped), no gc runs behind our back
            await self.run(
                [*pinned, "-c", "fetch.unpackLimit=1", "-c", "gc.auto=0", "fetch", "-q",
                 "--no-tags", "--no-write-fetch-head", "--", remote.target,
                 f"+refs/heads/{branch}:{ref}"],
                token=remote.token,
                cwd=bare,
                max_file=cap,
            )  # fmt: skip
        except GitError as exc:  # index-pack, cut at the cap, leaves its file that long
            cut = exc.reason.startswith("git wrote a file over")
            if not cut and await asyncio.to_thread(_size, bare, largest=True) < cap:
                raise
            self.forget(app_id)
            raise _too_large(cap, None) from None
        size = await asyncio.to_thread(_size, bare)
        if size > cap:
            self.forget(app_id)
            raise _too_large(cap, size)
        return (await self.run(["rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=bare)).strip()

    def prune(self, app_id: int, keep: set[str]) -> int:
        """Remove the app's checkouts but those of ``keep`` (commits); how many went. A
        checkout being made (``.new-*``) is left alone."""
        removed = 0
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self._cache / str(app_id)):
                if SHA.fullmatch(entry.name) and entry.name not in keep:
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)
                    removed += 1
        return removed

    async def commit(self, app_id: int, sha: str) -> Commit:
        """The commit ``sha`` in the app's cache (fetched before), with its message."""
        bare = self._bare(app_id)
        try:
            out = await self.run(
                ["log", "-1", "--format=%H%x00%B", f"{sha}^{{commit}}", "--"], cwd=bare
            )
        except GitError:
            raise FailedPrecondition(
                f"commit {sha} is not on the connected branch",
                hint="push it to the branch, or deploy the branch's head (leave commit out)",
            ) from None
        full, _, message = out.partition("\x00")
        return Commit(full.strip(), message.strip()[:2000])

    async def checkout(self, app_id: int, sha: str, remote: Remote | None = None) -> Path:
        """The tree of ``sha`` extracted under the cache (made once per commit): archived from
        the app's bare cache, or, for a local repository (``remote``), in the app's sandbox."""
        target = self._cache / str(app_id) / sha
        if target.is_dir() and not target.is_symlink():
            return target
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        work = Path(tempfile.mkdtemp(prefix=".new-", dir=target.parent))
        try:
            archive = work / "archive.tar"
            fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as sink:
                room = self.limits.max_bytes + self.limits.max_files * 1024 + 10240
                try:  # tar headers and padding: a little over the files' bytes
                    if remote is not None and _is_local(remote):
                        await self._local(
                            app_id, remote, "archive", sha, sink=sink, max_output=room
                        )
                    else:
                        await self.run(
                            ["archive", "--format=tar", sha],
                            cwd=self._bare(app_id),
                            sink=sink,
                            max_output=room,
                        )
                except GitError as exc:
                    if not exc.reason.startswith("git printed more than"):
                        raise
                    raise InvalidArgument(
                        f"commit {sha[:12]} is larger than {self.limits.max_bytes} bytes"
                    ) from None
            tree = work / "tree"
            tree.mkdir()
            self._extract(archive, tree, sha)
            archive.unlink()
            if not target.exists():  # else another deploy of this commit made it first
                tree.rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return target

    def _extract(self, archive: Path, tree: Path, sha: str) -> None:
        total = files = 0
        with tarfile.open(archive, "r:") as tar:
            members = []
            for member in tar:
                files += 1
                total += max(member.size, 0)
                if files > self.limits.max_files or total > self.limits.max_bytes:
                    raise InvalidArgument(
                        f"commit {sha[:12]} has more than {self.limits.max_files} files or "
                        f"{self.limits.max_bytes} bytes"
                    )
                members.append(member)
            try:
                tar.extractall(tree, members=members, filter="data")
            except tarfile.FilterError:
                raise InvalidArgument(
                    f"commit {sha[:12]} holds an entry that leads out of its tree (an absolute "
                    "path, a link leading out, a device or a special file)"
                ) from None


class _TooLong(Exception):
    pass


def _is_local(remote: Remote) -> bool:
    return remote.target.startswith("/")


def _heads(out: str) -> Heads:
    """``ls-remote --symref`` lines (``ref: refs/heads/<b>\tHEAD``, ``<sha>\trefs/heads/<b>``)."""
    default = None
    branches: dict[str, str] = {}
    for line in out.splitlines():
        left, _, name = line.partition("\t")
        if left.startswith("ref: refs/heads/") and name == "HEAD":
            default = left.removeprefix("ref: refs/heads/")
        elif SHA.fullmatch(left) and name.startswith("refs/heads/"):
            branches[name.removeprefix("refs/heads/")] = left
    return Heads(default if default in branches else None, branches)


def _cap_files(size: int) -> None:
    """In the child, before git runs: no file it writes grows past ``size`` bytes."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def _too_large(cap: int, size: int | None) -> InvalidArgument:
    seen = f" ({size >> 20} MiB)" if size is not None else ""
    return InvalidArgument(
        f"the repository's history is larger than {cap >> 20} MiB once fetched{seen}",
        hint="deploy from a smaller repository (or a shallow mirror of it)",
    )


def _size(root: Path, *, largest: bool = False) -> int:
    """Bytes of the files under ``root`` (links not followed), or of the largest one."""
    total = top = 0
    for folder, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                size = os.lstat(os.path.join(folder, name)).st_size
                total, top = total + size, max(top, size)
    return top if largest else total


async def _read(
    stream: asyncio.StreamReader | None,
    limit: int,
    sink: BinaryIO | None = None,
    *,
    cut: bool = False,
) -> bytes:
    """At most ``limit`` bytes of ``stream`` (:class:`_TooLong` beyond; with ``cut``, the
    rest is read and dropped), kept or written to ``sink`` as they come (a file never grows
    past the limit)."""
    if stream is None:
        return b""
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(65536):
        size += len(chunk)
        if size > limit:
            if cut:
                continue
            raise _TooLong
        if sink is not None:
            sink.write(chunk)
        else:
            chunks.append(chunk)
    return b"".join(chunks)


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


_SAID: Final = (
    (("could not read username", "authentication failed", "error: 401", "error: 403"),
     "the repository refused the credentials (HTTP 401/403)"),
    (("not found", "does not appear to be a git repository", "error: 404"),
     "the repository was not found"),
    (("could not resolve host", "failed to connect", "connection refused", "timed out",
      "ssl", "certificate"),
     "the repository's host could not be reached"),
    (("couldn't find remote ref", "invalid refspec"), "the branch is not in the repository"),
)  # fmt: skip
"""What git's output shows, in the platform's words (git's own words are never shown)."""
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _reason(err: bytes) -> str:
    """What went wrong, said by the platform: a known mark of git's stderr, else a plain
    "git failed" (git's output quotes the files it read: attacker input, maybe a secret)."""
    text = err.decode("utf-8", "replace").lower()
    for marks, said in _SAID:
        if any(mark in text for mark in marks):
            return said
    return "git could not read the repository"


def masked(err: bytes | str, token: str | None = None, limit: int = 4000) -> str:
    """git's output as it may be logged: the token (plain and as the Basic credential) and
    control characters dropped, at most ``limit`` characters."""
    text = err.decode("utf-8", "replace") if isinstance(err, bytes) else err
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        text = text.replace(token, "***").replace(basic, "***")
    return _CONTROL.sub("", text.replace("\n", " | ").strip())[:limit]


def unavailable(exc: GitError, what: str) -> Unavailable:
    """``what`` failed, said in the platform's words (``exc.reason``); git's output is not."""
    if "credentials" in exc.reason:
        return Unavailable(
            f"{what}: the repository refused the credentials (HTTP 401/403)",
            hint="give a token that can read the repository (token), or check the url",
        )
    return Unavailable(f"{what}: {exc.reason}", hint="check the url, the token and the branch")


async def execute(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    timeout_s: float,
    limit: int,
    cwd: Path | None = None,
    sink: BinaryIO | None = None,
    preexec: Callable[[], None] | None = None,
    pass_fds: Sequence[int] = (),
) -> tuple[int, bytes, bytes]:
    """Run ``argv`` in a session of its own: (exit status, stdout, stderr), stdout at most
    ``limit`` bytes (or written to ``sink``), stderr its first 64 KiB; :class:`GitError` past
    ``timeout_s`` or ``limit`` (the whole process group is killed)."""
    proc = await spawn(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        preexec_fn=preexec,
        pass_fds=tuple(pass_fds),
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await asyncio.gather(
                _read(proc.stdout, limit, sink), _read(proc.stderr, 1 << 16, cut=True)
            )
        async with asyncio.timeout(timeout_s):
            await proc.wait()
    except TimeoutError:
        _kill(proc)
        raise GitError(f"git took longer than {timeout_s:g} s") from None
    except _TooLong:
        _kill(proc)
        raise GitError(f"git printed more than {limit} bytes") from None
    finally:
        if proc.returncode is None:
            _kill(proc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await proc.wait()
    return proc.returncode if proc.returncode is not None else -1, out, err
