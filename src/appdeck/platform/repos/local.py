"""git on a tenant's local repository, run inside the app's build sandbox (issue 19).

A local repository (a path ``connect_repo`` accepted under the tenant's source roots) is the
tenant's files: its ``.git`` may be a ``gitdir:`` file, a link, borrow objects through
``objects/info/alternates``, hold links to the server's keys, or carry a config that makes git
run commands. So the platform never runs git on it as root, and never fetches it into its own
cache: every operation (the branches, a commit and its message, the tree as a ``git archive``
tar) runs in the app's sandox (:class:`~appdeck.runtime.sandbox.Sandbox`): the app's
uid, a loopback-only network, a cleared environment, a private ``/tmp``, and of the host only
``/usr``, a few ``/etc`` files and the repository, bound read-only at ``/source`` from a
descriptor opened without following links (the platform's repo cache and data dir are not
there to reach, and the uid could not read them if they were). Only what the platform needs
comes out, on stdout, bounded: the branch lines, one commit's sha and message, or the tar,
which :class:`~.git.Git` extracts with :mod:`tarfile`'s ``data`` filter under its limits.

Before git runs, the script refuses, in so many words, what it can see: ``.git`` as a link or
a file, ``objects/info/alternates``, a ``commondir``, any link inside the git directory.
What it cannot see is harmless by construction: a path git follows leads nowhere in the
sandbox. The descriptor the repository was bound from is closed before git starts (an open
directory descriptor would lead out of the sandbox through ``..``).

Without a sandbox (``APPDECK_SANDBOX=off``: one-tenant development only) the same script runs
as the server's user on the path itself, with the same checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from appdeck.common.errors import AppDeckError, FailedPrecondition, InvalidArgument
from appdeck.runtime.cgroups import Limits as CgroupLimits
from appdeck.runtime.sandbox import Sandbox
from appdeck.runtime.workspace import open_dir_nofollow

SOURCE: Final = "/source"
"""Where the repository is, inside the sandbox."""
GIT_LIMITS: Final = CgroupLimits(memory_mb=512, cpus=1.0, pids=64)
"""What one sandboxed git run may use."""
SCRIPT: Final = r"""
fd=$1; repo=$2; op=$3; shift 3
if [ -n "$fd" ]; then eval "exec $fd<&-"; fi
cd "$repo" 2>/dev/null || exit 90
if [ -L .git ]; then exit 91; fi
if [ -e .git ] && [ ! -d .git ]; then exit 92; fi
if [ -d .git ]; then G="$repo/.git"
elif [ -f HEAD ] && [ -d objects ] && [ -d refs ]; then G="$repo"
else exit 93; fi
for f in objects/info/alternates objects/info/http-alternates; do
  if [ -e "$G/$f" ] || [ -L "$G/$f" ]; then exit 94; fi
done
if [ -e "$G/commondir" ] || [ -L "$G/commondir" ]; then exit 92; fi
if [ -n "$(find "$G" -type l -print -quit 2>/dev/null)" ]; then exit 95; fi
g() { git -c safe.directory='*' -c core.fsmonitor=false -c protocol.allow=never \
  -c core.hooksPath=/dev/null --git-dir="$G" "$@"; }
case $op in
heads)
  if h=$(g symbolic-ref -q HEAD); then printf 'ref: %s\tHEAD\n' "$h"; fi
  g for-each-ref --format='%(objectname)%09%(refname)' refs/heads/ ;;
resolve)
  head=$(g rev-parse -q --verify "refs/heads/$1^{commit}") || exit 97
  sha=${2:-$head}
  if [ "$sha" != "$head" ]; then
    g cat-file -e "$sha^{commit}" 2>/dev/null || exit 98
    g merge-base --is-ancestor "$sha" "$head" || exit 98
  fi
  g log -1 --format='%H%x00%B' "$sha^{commit}" -- ;;
archive) g archive --format=tar "$1" ;;
*) exit 2 ;;
esac
"""
"""Run as ``bash -c SCRIPT appdeck-git <fd to close> <repository> <op> <args>`` (bash: dash
cannot close a descriptor numbered 10 or more)."""
_BASH: Final = ("/bin/bash", "--noprofile", "--norc", "-c")
_REFUSED: Final[Mapping[int, tuple[str, str]]] = {
    90: (
        "the repository's folder cannot be read by the app's sandbox user",
        "make the folder and its files readable by others (chmod -R o+rX), as for a source",
    ),
    91: (
        "the repository's .git is a symbolic link: only the repository in the folder itself "
        "is read",
        "connect the repository the link points at, by its own path",
    ),
    92: (
        "the repository's .git is a file (a gitdir: link or a linked worktree): only the "
        "repository in the folder itself is read",
        "connect the main repository, by its own path",
    ),
    93: ("the folder is not a git repository", "name a git repository (with a .git folder)"),
    94: (
        "the repository borrows objects from elsewhere (objects/info/alternates): refused",
        "make it self-contained: git repack -a -d, then remove objects/info/alternates",
    ),
    95: (
        "the repository's git directory holds a symbolic link: links are refused there",
        "replace the links by the files (git pack-refs --all writes packed-refs anew)",
    ),
}
MISSING_BRANCH: Final = 97
NOT_ON_BRANCH: Final = 98


@dataclass(frozen=True, slots=True)
class Run:
    code: int
    out: bytes
    err: bytes


class LocalRepos:
    """Runs :data:`SCRIPT` on a local repository, in the app's sandbox when there is one."""

    def __init__(self, scratch: Path, sandbox: Sandbox | None) -> None:
        """``scratch``: where each sandboxed run's empty, private ``/app`` is made (root's,
        0700, never the repo cache itself)."""
        self._scratch = scratch
        self.sandbox = sandbox

    async def run(
        self,
        app_id: int,
        repo: Path,
        op: str,
        args: tuple[str, ...],
        *,
        env: dict[str, str],
        execute: Executor,
        sink: BinaryIO | None = None,
    ) -> Run:
        """One run of the script: its exit status and (bounded) output. The refusals of
        :data:`_REFUSED` raise :class:`AppDeckError` in the platform's words."""
        if self.sandbox is None:
            code, out, err = await execute([*_BASH, SCRIPT, "appdeck-git", "", str(repo),
                                            op, *args], env, (), sink)  # fmt: skip
            return _checked(Run(code, out, err))
        sandbox = self.sandbox
        uid = sandbox.uid_for(app_id)
        self._scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        home = Path(tempfile.mkdtemp(prefix=f"{app_id}-", dir=self._scratch))
        key = f"{app_id}-git{secrets.token_hex(4)}"
        fd = -1
        try:
            os.chown(home, uid, uid)
            fd = open_dir_nofollow(repo)
            procs: tuple[Path, ...] = ()
            if sandbox.cgroups is not None:
                procs = (await asyncio.to_thread(sandbox.cgroups.create, key, GIT_LIMITS)).procs
            argv = sandbox.wrap(
                [*_BASH, SCRIPT, "appdeck-git", str(fd), SOURCE, op, *args],
                app_id=app_id,
                own_network=True,
                workspace=home,
                source_fd=fd,
                limits=GIT_LIMITS,
                cgroup_procs=procs,
            )
            code, out, err = await execute(argv, env | {"HOME": "/app"}, (fd,), sink)
        finally:
            if fd >= 0:
                os.close(fd)
            if sandbox.cgroups is not None:
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(sandbox.cgroups.remove, key)
            await asyncio.to_thread(shutil.rmtree, home, True)
        return _checked(Run(code, out, err))


def _checked(run: Run) -> Run:
    refused = _REFUSED.get(run.code)
    if refused is not None:
        message, hint = refused
        error = FailedPrecondition if run.code == 90 else InvalidArgument
        raise error(message, hint=hint)
    return run


def refuse_missing_branch(branch: str) -> AppDeckError:
    return InvalidArgument(f"branch {branch!r} is not in the repository")


def refuse_foreign_commit(sha: str) -> AppDeckError:
    return FailedPrecondition(
        f"commit {sha} is not on the connected branch",
        hint="push it to the branch, or deploy the branch's head (leave commit out)",
    )


Executor = Callable[
    [list[str], dict[str, str], tuple[int, ...], BinaryIO | None],
    Awaitable[tuple[int, bytes, bytes]],
]
"""What runs an argv: (argv, env, descriptors to pass, stdout's sink) -> (status, out, err)."""
