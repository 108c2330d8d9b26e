"""What running git in the app's sandbox costs (issue 19): before vs after, median of N runs.

    .venv/bin/python bench/git_sandbox.py [--runs 15] [--files 200]

Two local bare repositories made by this script (the fixture app ``tests/fixtures/apps/hello``
in one commit; ``--files`` files of 4 KiB over 20 commits), each read the two ways:

- **before** (git as root, what every local repository went through until issue 19 and what
  an https repository still does): ``connect_repo``'s read is ``git ls-remote --symref``; a
  deploy's source is ``Git.fetch`` into the app's bare cache, ``Git.commit``, then
  ``Git.checkout`` (``git archive`` from the cache, extracted with tarfile's ``data`` filter).
- **after** (the app's sandbox, ``appdeck.platform.repos.local``): ``Git.heads`` (one sandboxed
  run) and ``Git.resolve`` + ``Git.checkout`` (two sandboxed runs: the commit, then the tar),
  with the host's sandbox (``sandbox.detect``: bubblewrap, cgroups when writable).

Each run starts cold: the app's cache and checkouts are dropped first (a deploy of a commit
already checked out costs neither way). Runs alternate before/after. Needs root and bubblewrap.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from appdeck.platform.repos.git import Git, Remote
from appdeck.runtime.sandbox import detect

HELLO = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "apps" / "hello"
_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.com",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.com",
}
APP = 1


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=_ENV, check=True, capture_output=True)


def _repo(root: Path, name: str, commits: list[dict[str, str]]) -> Path:
    work = root / f"{name}-work"
    work.mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=work)
    for number, files in enumerate(commits):
        for rel, text in files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        _git("add", "-A", cwd=work)
        _git("commit", "-q", "-m", f"commit {number}", cwd=work)
    bare = root / f"{name}.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=root)
    subprocess.run(["chmod", "-R", "o+rX", str(root)], check=True)
    return bare


async def _timed(work: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await work()
    return (time.perf_counter() - start) * 1000


async def measure(bare: Path, runs: int, scratch: Path) -> dict[str, float]:
    sandbox = detect()
    before = Git(scratch / "before" / "repos")
    after = Git(scratch / "after" / "repos", sandbox=sandbox)
    remote = Remote(str(bare))
    times: dict[str, list[float]] = {k: [] for k in ("connect:before", "connect:after",
                                                     "source:before", "source:after")}  # fmt: skip

    async def connect_before() -> None:
        await before.run(["ls-remote", "--symref", "--", str(bare), "HEAD", "refs/heads/*"])

    async def source_before() -> None:
        head = await before.fetch(APP, remote, "main")
        found = await before.commit(APP, head)
        await before.checkout(APP, found.sha)

    async def source_after() -> None:
        found = await after.resolve(APP, remote, "main", None)
        await after.checkout(APP, found.sha, remote)

    for run in range(runs + 1):  # the first round warms the page cache: not counted
        order = ("before", "after") if run % 2 else ("after", "before")
        for side in order:
            git = before if side == "before" else after
            git.forget(APP)
            if side == "before":
                connect = await _timed(connect_before)
                source = await _timed(source_before)
            else:
                connect = await _timed(lambda: after.heads(remote, APP))
                source = await _timed(source_after)
            if run:
                times[f"connect:{side}"].append(connect)
                times[f"source:{side}"].append(source)
    return {key: statistics.median(values) for key, values in times.items()}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--files", type=int, default=200)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="git-bench-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        hello = {p.name: p.read_text() for p in HELLO.iterdir() if p.is_file()}
        block = "x" * 4095 + "\n"
        per = max(1, options.files // 20)
        many = [{f"pkg{c}/f{i}.txt": f"{c}-{i}\n{block}" for i in range(per)} for c in range(20)]
        repos = {"hello": _repo(root, "hello", [hello]), f"{options.files} files": _repo(
            root, "many", many)}  # fmt: skip
        print(f"median of {options.runs} runs, ms (cold: cache and checkouts dropped each run)")
        print(f"{'repository':<12} {'what':<8} {'before':>8} {'after':>8} {'added':>8}")
        for name, bare in repos.items():
            found = await measure(bare, options.runs, root / "scratch" / name.replace(" ", "-"))
            for what in ("connect", "source"):
                b, a = found[f"{what}:before"], found[f"{what}:after"]
                print(f"{name:<12} {what:<8} {b:8.1f} {a:8.1f} {a - b:+8.1f}")


if __name__ == "__main__":
    asyncio.run(main())
