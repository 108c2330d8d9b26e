"""HostedService in the app's real sandbox: inline files committed as the caller (quoted
paths, deletions, the same files twice make no new commit), who may commit, an app connected
elsewhere refused, one push at a time per app (across replicas too, through Redis)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from redis.asyncio import Redis

from appdeck.common.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from appdeck.events.leases import RedisLeases
from appdeck.platform.repos.hosted import HostedLimits
from appdeck.platform.repos.hosting import HostedService, PushBusy
from appdeck.platform.repos.inline import InlineFile
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.platform.repos.gitrepo import bare_repo, git
from tests.support.sandbox import sandbox_or_skip

UID_BASE = 250_000
SPEC = {"run_command": "python3 app.py"}
REFS = {"REQUEST_METHOD": "GET", "PATH_INFO": "/info/refs", "QUERY_STRING": "service=git-receive-pack"}  # fmt: skip


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    sandbox = sandbox_or_skip(UID_BASE)
    return await platform_on_fakes(storage, tmp_path, sandbox=sandbox, hosted=HostedLimits())


def _git(repo: Path, *args: str) -> str:
    """git as the test (root) reads the app's repository: not its owner, so safe.directory."""
    return git("-c", "safe.directory=*", *args, cwd=repo)


def _hosting(on: OnFakes) -> HostedService:
    assert on.platform.hosting is not None
    return on.platform.hosting


async def test_inline_files_are_a_commit_by_the_caller_on_top_of_the_head(on: OnFakes) -> None:
    hosting = _hosting(on)
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    odd = 'we"ird dir/ü name.txt'
    first = await hosting.commit_files(
        on.alice, app_id, [InlineFile("app.py", "v1"), InlineFile(odd, "odd"),
                           InlineFile("bin.dat", "AAEC", "base64")],
    )  # fmt: skip
    assert (first.connected, first.changed, first.branch) == (True, True, "main")
    connection = await on.platform.repos.connection(app_id)
    assert connection is not None
    assert connection.auto_deploy  # a later git push to the remote deploys, as the files did
    repo = hosting.hosted.path(app_id)
    assert os.stat(repo / "refs" / "heads").st_uid == UID_BASE + app_id
    assert _git(repo, "log", "-1", "--format=%an <%ae>", first.sha) == (
        f"{on.alice.user} <{on.alice.user}@acme>"
    )
    second = await hosting.commit_files(
        on.alice, app_id, [InlineFile("app.py", "v2"), InlineFile(odd, None)]
    )
    assert _git(repo, "rev-parse", f"{second.sha}^") == first.sha
    tree = _git(repo, "ls-tree", "-r", "--name-only", second.sha).splitlines()
    assert sorted(tree) == ["app.py", "bin.dat"]  # not listed: kept; null: deleted
    assert _git(repo, "show", f"{second.sha}:bin.dat") == "\x00\x01\x02"
    mode = _git(repo, "ls-tree", second.sha, "app.py").split()[0]
    assert mode == "100644"
    same = await hosting.commit_files(on.alice, app_id, [InlineFile("app.py", "v2")])
    assert (same.sha, same.changed, same.connected) == (second.sha, False, False)
    source = await on.platform.repos.source((await on.platform.apps.store.get(app_id)), None)  # type: ignore[arg-type]
    assert source is not None
    assert source["commit"] == second.sha
    assert Path(source["path"], "app.py").read_text() == "v2"  # noqa: ASYNC240


async def test_only_the_apps_developers_commit_and_never_to_another_repository(
    on: OnFakes,
) -> None:
    hosting = _hosting(on)
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    files = [InlineFile("a", "a")]
    with pytest.raises(NotFound):
        await hosting.commit_files(on.eve, app_id, files)  # another tenant
    with pytest.raises(NotFound):
        await hosting.commit_files(on.bob, app_id, files)  # no role on the app
    await on.platform.apps.grant(on.alice, app_id, "bob", "viewer")
    with pytest.raises(PermissionDenied):
        await hosting.commit_files(on.bob, app_id, files)  # a viewer does not deploy
    with pytest.raises(InvalidArgument):
        await hosting.commit_files(on.alice, app_id, [InlineFile("../a", "a")])
    assert await on.platform.repos.connection(app_id) is None  # refused: nothing connected
    made = bare_repo(on.source.parent)
    made.commit({"app.py": "x"}, "x")
    await on.platform.repos.connect(on.alice, app_id, str(made.bare))
    with pytest.raises(FailedPrecondition, match="inline files go to its hosted repository"):
        await hosting.commit_files(on.alice, app_id, files)


async def test_one_push_at_a_time_per_app(on: OnFakes) -> None:
    hosting = _hosting(on)
    app = (await on.platform.apps.register(on.alice, "shop", SPEC)).app
    first = await hosting.serve(app, REFS, write=True)
    try:
        with pytest.raises(PushBusy):
            await hosting.serve(app, REFS, write=True)
        reading = await hosting.serve(app, {**REFS, "QUERY_STRING": "service=git-upload-pack"},
                                      write=False)  # fmt: skip
        reading.kill()
        await reading.close()
        await hosting.done(app, write=False, ok=False)
    finally:
        first.kill()
        await first.close()
        await hosting.done(app, write=True, ok=False)
    again = await hosting.serve(app, REFS, write=True)
    again.kill()
    await again.close()
    await hosting.done(app, write=True, ok=False)


async def test_the_push_limit_holds_across_replicas_through_shared_leases(
    on: OnFakes, redis: Redis, redis_prefix: str
) -> None:
    hosting = _hosting(on)
    hosting.leases = RedisLeases(redis, redis_prefix, ttl_seconds=150)
    other_replica = RedisLeases(redis, redis_prefix, ttl_seconds=150)
    app = (await on.platform.apps.register(on.alice, "shop", SPEC)).app
    elsewhere = await other_replica.acquire(f"push:{app.id}:0")  # a push on another replica
    assert elsewhere is not None
    with pytest.raises(PushBusy):
        await hosting.serve(app, REFS, write=True)
    await other_replica.release(elsewhere)
    first = await hosting.serve(app, REFS, write=True)
    try:
        assert await other_replica.acquire(f"push:{app.id}:0") is None  # held from here
    finally:
        first.kill()
        await first.close()
        await hosting.done(app, write=True, ok=False)
    taken = await other_replica.acquire(f"push:{app.id}:0")  # released with the push
    assert taken is not None
    await other_replica.release(taken)
