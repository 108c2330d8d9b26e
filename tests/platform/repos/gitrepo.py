"""A local bare git repository with commits, made in a tmp dir (the fixture of the repo tests)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Dev",
    "GIT_AUTHOR_EMAIL": "dev@example.com",
    "GIT_COMMITTER_NAME": "Dev",
    "GIT_COMMITTER_EMAIL": "dev@example.com",
}


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=_ENV, capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.strip()


@dataclass
class BareRepo:
    bare: Path
    work: Path

    def commit(self, files: dict[str, str], message: str, branch: str = "main") -> str:
        """Commit ``files`` on ``branch`` and push it; the new sha."""
        git("checkout", "-q", "-B", branch, cwd=self.work)
        for name, text in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", message, cwd=self.work)
        git("push", "-q", "origin", f"{branch}:{branch}", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


def bare_repo(where: Path, name: str = "shop.git") -> BareRepo:
    """An empty bare repository at ``where/name`` (default branch main) and a work clone."""
    where.mkdir(parents=True, exist_ok=True)
    bare = where / name
    git("init", "-q", "--bare", "-b", "main", str(bare), cwd=where)
    work = where.parent / f"{name}-work"
    git("clone", "-q", str(bare), str(work), cwd=where)
    return BareRepo(bare, work)
