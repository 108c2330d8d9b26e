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
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, Final
from urllib.parse import urlsplit

from appdeck.common.errors import FailedPrecondition, InvalidArgument, Unavailable
from appdeck.platform.repos import reach
from appdeck.platform.runtime.egress import EgressPolicy

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
    """git failed; ``reason`` is its first line of stderr, token scrubbed, bounded."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Git:
    def __init__(
        self,
        cache_dir: Path,
        limits: Limits | None = None,
        *,
        policy: EgressPolicy | None = None,
        resolve: reach.Resolve = reach.system_resolve,
        ca_file: Path | None = None,
    ) -> None:
        """``policy`` decides where git may connect (tests allow one loopback port with its
        ``extra_allowed``); ``ca_file``, when given, is the only CA git trusts for https (tests:
        the loopback server's own CA; never a setting users reach)."""
        self._cache = cache_dir
        self.limits = limits or Limits()
        self.policy = policy or EgressPolicy()
        self._resolve = resolve
        self._tls = ("-c", f"http.sslCAInfo={ca_file}") if ca_file is not None else ()

    async def _reach(self, remote: Remote) -> list[str]:
        """The options that pin git to a checked address of the remote's host (none for a
        local path); refused before git runs when the host is not allowed."""
        if remote.target.startswith("/"):
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
        limit = max_output or self.limits.max_output
        capped: tuple[str, ...] = ()
        if max_file is not None and _PRLIMIT is not None:  # util-linux: no code after fork
            capped = (_PRLIMIT, f"--fsize={max_file}:{max_file}", "--")
        proc = await asyncio.create_subprocess_exec(
            *capped,
            "git",
            *_SAFE,
            *self._tls,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env(token),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=None if max_file is None or capped else partial(_cap_files, max_file),
        )
        try:
            out, err = await asyncio.wait_for(
                asyncio.gather(_read(proc.stdout, limit, sink), _read(proc.stderr, 4096)),
                self.limits.timeout_s,
            )
            await asyncio.wait_for(proc.wait(), self.limits.timeout_s)
        except TimeoutError:
            _kill(proc)
            raise GitError(f"git took longer than {self.limits.timeout_s:g} s") from None
        except _TooLong:
            _kill(proc)
            raise GitError(f"git printed more than {limit} bytes") from None
        finally:
            if proc.returncode is None:
                _kill(proc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5)
        if proc.returncode != 0:
            if max_file is not None and (
                proc.returncode == -signal.SIGXFSZ or b"File too large" in err
            ):
                raise GitError(f"git wrote a file over {max_file} bytes")
            raise GitError(_reason(err, token))
        return out.decode("utf-8", "replace")

    # -- what a remote has --------------------------------------------------------------

    async def heads(self, remote: Remote) -> Heads:
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
        default = None
        branches: dict[str, str] = {}
        for line in out.splitlines():
            left, _, name = line.partition("\t")
            if left.startswith("ref: refs/heads/") and name == "HEAD":
                default = left.removeprefix("ref: refs/heads/")
            elif SHA.fullmatch(left) and name.startswith("refs/heads/"):
                branches[name.removeprefix("refs/heads/")] = left
        return Heads(default if default in branches else None, branches)

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

    async def checkout(self, app_id: int, sha: str) -> Path:
        """The tree of ``sha`` extracted under the cache (made once per commit)."""
        target = self._cache / str(app_id) / sha
        if target.is_dir() and not target.is_symlink():
            return target
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        work = Path(tempfile.mkdtemp(prefix=".new-", dir=target.parent))
        try:
            archive = work / "archive.tar"
            fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as sink:
                try:  # tar headers and padding: a little over the files' bytes
                    await self.run(
                        ["archive", "--format=tar", sha],
                        cwd=self._bare(app_id),
                        sink=sink,
                        max_output=self.limits.max_bytes + self.limits.max_files * 1024 + 10240,
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
            except tarfile.FilterError as exc:
                raise InvalidArgument(
                    f"commit {sha[:12]} holds an entry that leads out of its tree: "
                    f"{type(exc).__name__}"
                ) from None


class _TooLong(Exception):
    pass


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
    stream: asyncio.StreamReader | None, limit: int, sink: BinaryIO | None = None
) -> bytes:
    """At most ``limit`` bytes of ``stream`` (:class:`_TooLong` beyond), kept or written to
    ``sink`` as they come (a file never grows past the limit)."""
    if stream is None:
        return b""
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(65536):
        size += len(chunk)
        if size > limit:
            raise _TooLong
        if sink is not None:
            sink.write(chunk)
        else:
            chunks.append(chunk)
    return b"".join(chunks)


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _reason(err: bytes, token: str | None) -> str:
    text = err.decode("utf-8", "replace")
    if token:
        text = text.replace(token, "***")
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    first = next((x for x in lines if x.startswith("fatal:")), lines[0] if lines else "")
    return (first.removeprefix("fatal: ") or "git failed")[:300]


_REFUSED: Final = ("could not read username", "authentication failed", "error: 401", "error: 403")


def unavailable(exc: GitError, what: str) -> Unavailable:
    if any(mark in exc.reason.lower() for mark in _REFUSED):
        return Unavailable(
            f"{what}: the repository refused the credentials (HTTP 401/403)",
            hint="give a token that can read the repository (token), or check the url",
        )
    return Unavailable(f"{what}: {exc.reason}", hint="check the url, the token and the branch")
