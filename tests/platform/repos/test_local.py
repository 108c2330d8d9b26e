"""git on a local repository runs in the app's sandbox (issue 19 findings 1 and 2): only the
repository is bound, as the app's uid; git's indirections lead nowhere, the refusals are
said in the platform's words, and nothing git printed reaches a caller."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.platform.repos.git import Git, GitError, Remote, unavailable
from appdeck.runtime.sandbox import Sandbox
from tests.platform.repos.gitrepo import bare_repo, git
from tests.support.sandbox import sandbox_or_skip

UID_BASE = 230_000
APP = 7


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return sandbox_or_skip(UID_BASE)


def _git(tmp_path: Path, sandbox: Sandbox | None) -> Git:
    return Git(tmp_path / "data" / "repos", sandbox=sandbox)


def _open_to_all(path: Path) -> None:
    """pytest's tmp dirs are root's 0700: let the app's uid reach the repository, as a
    tenant's source root does."""
    for parent in [path, *path.parents]:
        if parent == Path("/"):
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o755)
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                os.chmod(full, os.stat(full).st_mode | 0o755)


def _packed_refs_link(path: Path, target: Path) -> None:
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=path)
    (path / "app.py").write_text("print('hi')\n")
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "one", cwd=path)
    git("pack-refs", "--all", cwd=path)
    (path / ".git" / "packed-refs").unlink()
    (path / ".git" / "packed-refs").symlink_to(target)


async def test_a_local_repository_is_listed_resolved_and_checked_out_in_the_sandbox(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    repo = bare_repo(tmp_path / "src", "shop.git")
    first = repo.commit({"app.py": "print('v1')\n"}, "v1")
    second = repo.commit({"app.py": "print('v2')\n", "lib/x.py": "X = 1\n"}, "v2")
    repo.commit({"side.py": "1\n"}, "side", branch="side")
    _open_to_all(tmp_path / "src")
    gits = _git(tmp_path, sandbox)
    remote = Remote(str(repo.bare))
    heads = await gits.heads(remote, APP)
    assert heads.default == "main"
    assert heads.branches["main"] == second
    assert set(heads.branches) == {"main", "side"}
    head = await gits.resolve(APP, remote, "main", None)
    assert (head.sha, head.message) == (second, "v2")
    assert (await gits.resolve(APP, remote, "main", first)).sha == first
    tree = await gits.checkout(APP, second, remote)
    assert (tree / "lib" / "x.py").read_text() == "X = 1\n"
    assert tree.is_absolute()
    assert not (tmp_path / "data" / "repos" / f"{APP}.git").exists()  # no cache of it
    assert list((tmp_path / "data" / "repos" / ".sandbox").iterdir()) == []


async def test_a_commit_off_the_branch_or_a_missing_branch_is_refused_in_our_words(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    repo = bare_repo(tmp_path / "src", "shop.git")
    repo.commit({"a": "1"}, "one")
    other = repo.commit({"b": "2"}, "two", branch="side")
    _open_to_all(tmp_path / "src")
    gits = _git(tmp_path, sandbox)
    with pytest.raises(FailedPrecondition, match="not on the connected branch"):
        await gits.resolve(APP, Remote(str(repo.bare)), "main", other)
    with pytest.raises(InvalidArgument, match="'nope' is not in the repository"):
        await gits.resolve(APP, Remote(str(repo.bare)), "nope", None)


@pytest.mark.parametrize("target", ["key", "/etc/shadow"])
async def test_a_symlinked_packed_refs_is_refused_and_not_echoed(
    tmp_path: Path, sandbox: Sandbox, target: str
) -> None:
    key = tmp_path / "data" / "keys" / "secret.key"
    key.parent.mkdir(parents=True)
    key.write_text("THE-SEALING-KEY-f00d\n")
    _packed_refs_link(tmp_path / "src" / "pk", key if target == "key" else Path(target))
    _open_to_all(tmp_path / "src")
    with pytest.raises(InvalidArgument) as refused:
        await _git(tmp_path, sandbox).heads(Remote(str(tmp_path / "src" / "pk")), APP)
    said = f"{refused.value.message} {refused.value.hint}"
    assert "symbolic link" in said
    assert "THE-SEALING-KEY" not in said
    assert "root:" not in said


@pytest.mark.parametrize("shape", ["gitdir", "linked", "alternates", "commondir"])
async def test_a_repository_leading_to_another_is_refused_before_git_runs(
    tmp_path: Path, sandbox: Sandbox, shape: str
) -> None:
    victim = bare_repo(tmp_path / "src" / "t1", "shop.git")
    head = victim.commit({"app.py": "SECRET = 'of t1'\n"}, "t1")
    mine = tmp_path / "src" / "t2" / "r"
    mine.mkdir(parents=True)
    if shape == "gitdir":
        (mine / ".git").write_text(f"gitdir: {victim.bare}\n")
    elif shape == "linked":
        (mine / ".git").symlink_to(victim.bare)
    else:
        git("init", "-q", "-b", "main", cwd=mine)
        (mine / ".git" / "refs" / "heads" / "main").write_text(f"{head}\n")
        if shape == "alternates":
            (mine / ".git" / "objects" / "info" / "alternates").write_text(
                f"{victim.bare}/objects\n"
            )
        else:
            (mine / ".git" / "commondir").write_text(f"{victim.bare}\n")
    _open_to_all(tmp_path / "src")
    gits = _git(tmp_path, sandbox)
    with pytest.raises(InvalidArgument) as refused:
        await gits.heads(Remote(str(mine)), APP)
    assert str(victim.bare) not in refused.value.message
    with pytest.raises(InvalidArgument):
        await gits.resolve(APP, Remote(str(mine)), "main", None)


async def test_a_command_the_repositorys_config_runs_is_the_apps_and_reaches_nothing(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """A tenant's ``.git/config`` can make git run commands (a smudge filter runs during
    ``git archive``): they run as the app's uid, see neither the data dir nor the key, and
    hold no descriptor leading out of the sandbox. The filter's output is the file's content."""
    key = tmp_path / "data" / "keys" / "secret.key"
    key.parent.mkdir(parents=True)
    key.write_text("THE-SEALING-KEY-f00d\n")
    os.chmod(key, 0o644)  # even readable by all: it is not in the sandbox
    repo = tmp_path / "src" / "r"
    repo.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / ".gitattributes").write_text("spy filter=spy\n")
    (repo / "spy").write_text("x\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "spy", cwd=repo)
    probe = f"id -u; ls -l /proc/self/fd/; cat {key} 2>&1; ls {tmp_path / 'data'} 2>&1; true"
    git("config", "filter.spy.smudge", f"sh -c '{probe}'", cwd=repo)
    _open_to_all(tmp_path / "src")
    gits = _git(tmp_path, sandbox)
    remote = Remote(str(repo))
    found = await gits.resolve(APP, remote, "main", None)
    seen = (await gits.checkout(APP, found.sha, remote)) / "spy"
    text = seen.read_text()
    assert text.splitlines()[0] == str(sandbox.uid_for(APP))
    assert "THE-SEALING-KEY" not in text
    assert "No such file" in text
    assert str(tmp_path) not in text.split("cat:")[0], text  # no descriptor of a host path


async def test_a_repository_the_app_uid_cannot_read_fails_saying_so(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    repo = bare_repo(tmp_path / "src", "shop.git")
    repo.commit({"a": "1"}, "one")
    _open_to_all(tmp_path / "src")
    os.chmod(repo.bare, 0o700)
    with pytest.raises(FailedPrecondition, match="cannot be read by the app's sandbox user"):
        await _git(tmp_path, sandbox).heads(Remote(str(repo.bare)), APP)


async def test_unsandboxed_the_same_checks_refuse_a_symlinked_packed_refs(
    tmp_path: Path,
) -> None:
    key = tmp_path / "data" / "keys" / "secret.key"
    key.parent.mkdir(parents=True)
    key.write_text("THE-SEALING-KEY-f00d\n")
    _packed_refs_link(tmp_path / "src" / "pk", key)
    with pytest.raises(InvalidArgument, match="symbolic link"):
        await _git(tmp_path, None).heads(Remote(str(tmp_path / "src" / "pk")), APP)


def test_git_output_never_reaches_the_callers_words() -> None:
    leaked = GitError(
        "git could not read the repository", output="fatal: bad line: THE-SEALING-KEY"
    )
    refused = unavailable(leaked, "the repository could not be read")
    assert "THE-SEALING-KEY" not in f"{refused.message} {refused.hint}"
