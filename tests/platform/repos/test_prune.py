"""Old checkouts are pruned after each new one (the last deployments', the live one's and the
one it replaced are kept); a repository too large once fetched is refused and dropped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.platform.repos import git as git_module
from appdeck.platform.repos.git import SHA, Limits, Remote
from appdeck.platform.repos.prune import KEEP_RECENT
from tests.platform.on_fakes import OnFakes
from tests.platform.repos.gitrepo import BareRepo, bare_repo

SPEC = {"run_command": "python3 app.py"}


@pytest.fixture
def repo(on: OnFakes) -> BareRepo:
    made = bare_repo(on.source.parent)
    made.commit({"app.py": "print('v0')\n"}, "v0")
    return made


def _checkouts(tmp_path: Path, app_id: int) -> set[str]:
    return {p.name for p in (tmp_path / "repos" / str(app_id)).iterdir()}


async def _deployed_many(on: OnFakes, repo: BareRepo) -> tuple[int, list[str]]:
    """An app connected to ``repo`` with KEEP_RECENT + 3 commits deployed one after another."""
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    await on.platform.repos.connect(on.alice, app_id, str(repo.bare))
    shas = []
    for n in range(KEEP_RECENT + 3):
        shas.append(repo.commit({"app.py": f"print('v{n + 1}')\n"}, f"v{n + 1}"))
        assert (await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)).live
    return app_id, shas


async def test_only_the_checkouts_of_deployments_worth_keeping_stay(
    on: OnFakes, repo: BareRepo, tmp_path: Path
) -> None:
    app_id, shas = await _deployed_many(on, repo)
    deployments = on.platform.deployments
    # pruned when the last one was checked out: the 5 deployments before it, and it
    assert _checkouts(tmp_path, app_id) == set(shas[-KEEP_RECENT - 1 :])
    # a rollback target beyond the recent ones: deploying an old commit keeps it
    again = await deployments.deploy(on.alice, app_id, wait_s=None, commit=shas[0])
    assert again.live
    assert _checkouts(tmp_path, app_id) == {shas[0], *shas[-KEEP_RECENT:]}
    assert Path(again.record.source["path"], "app.py").read_text() == "print('v1')\n"  # noqa: ASYNC240


@pytest.mark.parametrize("prlimit", [True, False], ids=["prlimit", "setrlimit"])
async def test_a_fetch_over_the_cache_limit_is_cut_refused_and_dropped(
    on: OnFakes, repo: BareRepo, tmp_path: Path, prlimit: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache holds what the platform fetches over https (a local repository is read in
    the app's sandbox, never fetched): its fetch, driven here from a path, is capped."""
    if not prlimit:  # where util-linux's prlimit is missing: the limit is set after fork
        monkeypatch.setattr(git_module, "_PRLIMIT", None)
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    repo.commit({"big.bin": os.urandom(200_000).hex()}, "a big file")  # a 200 kB pack
    git = on.platform.repos._git
    git.limits = Limits(max_cache_bytes=100_000)  # the pack file, capped
    with pytest.raises(InvalidArgument, match=r"larger than 0 MiB once fetched$"):
        await git.fetch(app_id, Remote(str(repo.bare)), "main")
    assert not (tmp_path / "repos" / f"{app_id}.git").exists()
    git.limits = Limits()
    assert SHA.fullmatch(await git.fetch(app_id, Remote(str(repo.bare)), "main"))


async def test_a_cache_that_grows_over_the_limit_fetch_by_fetch_is_dropped(
    on: OnFakes, repo: BareRepo, tmp_path: Path
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    git = on.platform.repos._git
    git.limits = Limits(max_cache_bytes=80_000)
    repo.commit({"one.bin": os.urandom(50_000).hex()}, "a 50 kB pack")
    assert SHA.fullmatch(await git.fetch(app_id, Remote(str(repo.bare)), "main"))
    repo.commit({"two.bin": os.urandom(50_000).hex()}, "another")  # each pack fits
    with pytest.raises(InvalidArgument, match=r"once fetched \(0 MiB\)"):
        await git.fetch(app_id, Remote(str(repo.bare)), "main")
    assert not (tmp_path / "repos" / f"{app_id}.git").exists()


def test_a_stray_entry_named_like_a_commit_is_pruned_but_work_in_progress_is_not(
    tmp_path: Path,
) -> None:
    from appdeck.platform.repos.git import Git

    git = Git(tmp_path)
    where = tmp_path / "7"
    (where / ("a" * 40)).mkdir(parents=True)
    (where / ("b" * 40)).write_text("x")
    (where / ".new-abc").mkdir()
    (where / ("c" * 40)).mkdir()
    assert git.prune(7, {"c" * 40}) == 2
    assert {p.name for p in where.iterdir()} == {".new-abc", "c" * 40}
    assert git.prune(8, set()) == 0  # no checkouts at all


async def test_a_rollback_past_the_kept_checkouts_checks_the_commit_out_again(
    on: OnFakes, repo: BareRepo, tmp_path: Path
) -> None:
    app_id, shas = await _deployed_many(on, repo)
    assert shas[0] not in _checkouts(tmp_path, app_id)  # pruned
    back = await on.platform.deploys.rollback(
        (await on.platform.apps.load(on.alice, app_id, "deploy.write")).app, 1
    )
    assert (back.number, back.state, back.source["commit"]) == (1, "live", shas[0])
    checkout = tmp_path / "repos" / str(app_id) / shas[0] / "app.py"
    assert checkout.read_text() == "print('v1')\n"


async def test_a_rollback_to_a_pruned_checkout_of_a_disconnected_repository_is_refused(
    on: OnFakes, repo: BareRepo, tmp_path: Path
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    await on.platform.repos.connect(on.alice, app_id, str(repo.bare))
    for n in range(2):
        repo.commit({"app.py": f"print('v{n + 1}')\n"}, f"v{n + 1}")
        assert (await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)).live
    await on.platform.repos.disconnect(on.alice, app_id)  # drops the cache and checkouts
    with pytest.raises(FailedPrecondition, match="no longer connected"):
        await on.platform.deploys.rollback(
            (await on.platform.apps.load(on.alice, app_id, "deploy.write")).app, 1
        )
    [live, *_] = await on.platform.deploys.store.for_app(app_id, offset=0, limit=10)
    assert (live.number, live.state) == (2, "live")
