"""RepoService: connect an app to a git repository (a local bare one here), read, list
branches and disconnect; refused URLs; the token is sealed and never shown."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sqlalchemy as sa

from appdeck.common.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from appdeck.runtime.egress import EgressPolicy
from appdeck.storage import Storage
from appdeck.storage.schema import repo_connections
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.platform.repos.gitrepo import BareRepo, bare_repo

TOKEN = "ghp_s3cr3tTOKENvalue0123456789"


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


@pytest.fixture
def repo(on: OnFakes) -> BareRepo:
    made = bare_repo(on.source.parent)  # inside acme's source root
    made.commit({"app.py": "print('v1')\n"}, "first version")
    return made


async def test_connect_picks_the_default_branch_and_shows_the_secret_once(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    head = repo.commit({"app.py": "print('v2')\n"}, "second version")
    repos = on.platform.repos
    connected = await repos.connect(on.alice, app_id, f"file://{repo.bare}")
    assert connected.repo.branch == "main"
    assert connected.head == head
    assert len(connected.webhook_secret) >= 40
    assert connected.repo.webhook_path == f"/hooks/git/{app_id}"
    again = await repos.get(on.alice, app_id)
    assert again.url == f"file://{repo.bare}"
    assert not again.has_token
    assert not hasattr(again, "webhook_secret")


async def test_a_named_branch_must_exist_and_branches_are_listed(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    repo.commit({"x.txt": "x"}, "on dev", branch="dev")
    repos = on.platform.repos
    with pytest.raises(InvalidArgument, match="'nope' is not in the repository"):
        await repos.connect(on.alice, app_id, str(repo.bare), branch="nope")
    connected = await repos.connect(on.alice, app_id, str(repo.bare), branch="dev")
    assert connected.repo.branch == "dev"
    names = [(b.name, b.default) for b in await repos.branches(on.alice, app_id)]
    assert names == [("dev", False), ("main", True)]


async def test_disconnect_forgets_the_repository(on: OnFakes, repo: BareRepo) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    repos = on.platform.repos
    await repos.connect(on.alice, app_id, str(repo.bare))
    assert await repos.disconnect(on.alice, app_id)
    with pytest.raises(NotFound):
        await repos.get(on.alice, app_id)
    assert not await repos.disconnect(on.alice, app_id)


async def test_roles_and_tenants_are_checked_before_git_runs(on: OnFakes, repo: BareRepo) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    repos = on.platform.repos
    with pytest.raises(NotFound):
        await repos.connect(on.eve, app_id, str(repo.bare))
    with pytest.raises(NotFound):
        await repos.connect(on.bob, app_id, str(repo.bare))
    await on.platform.apps.grant(on.alice, app_id, "bob", "viewer")
    with pytest.raises(PermissionDenied):
        await repos.connect(on.bob, app_id, str(repo.bare))
    await on.platform.apps.grant(on.alice, app_id, "bob", "developer")
    assert (await repos.connect(on.bob, app_id, str(repo.bare))).repo.branch == "main"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ext::sh -c touch% /tmp/pwned", "not a URL this platform fetches from"),
        ("fd::3", "not a URL this platform fetches from"),
        ("ssh://host/repo.git", "scheme 'ssh' is not allowed"),
        ("http://host/repo.git", "scheme 'http' is not allowed"),
        ("git@github.com:o/r.git", "not a URL this platform fetches from"),
        ("https://host/repo.git\nfoo", "control character"),
        ("/srv/x\x00y", "control character"),
        ("https://host/" + "a" * 10_240, "longer than 2048"),
        ("--upload-pack=touch /tmp/pwned", "must not start with '-'"),
        ("https://host", "names no repository"),
        ("file://otherhost/x.git", "names no host"),
    ],
)
async def test_urls_outside_the_rule_are_refused_before_git_runs(
    on: OnFakes, url: str, says: str
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    with pytest.raises(InvalidArgument, match=says):
        await on.platform.repos.connect(on.alice, app_id, url)


async def test_a_local_repository_must_be_in_the_tenants_source_roots(
    on: OnFakes, tmp_path: Path
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    outside = bare_repo(tmp_path / "elsewhere")
    outside.commit({"a": "a"}, "x")
    for url in (str(outside.bare), f"file://{outside.bare}", f"{on.source.parent}/../elsewhere"):
        with pytest.raises(InvalidArgument, match="source"):
            await on.platform.repos.connect(on.alice, app_id, url)
    link = on.source.parent / "link.git"
    link.symlink_to(outside.bare)
    with pytest.raises(InvalidArgument, match="leads outside your source roots"):
        await on.platform.repos.connect(on.alice, app_id, str(link))


async def test_credentials_in_the_url_are_refused_without_echoing_them(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    with pytest.raises(InvalidArgument) as refused:
        await on.platform.repos.connect(on.alice, app_id, f"https://x:{TOKEN}@example.com/o/r")
    assert TOKEN not in str(refused.value)
    assert TOKEN not in (refused.value.hint or "")


async def test_an_unreachable_repository_is_unavailable_and_the_token_never_shows(
    on: OnFakes, storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    caplog.set_level(logging.DEBUG)
    # loopback is let through for this port only (the egress rule refuses it otherwise)
    on.platform.repos._git.policy = EgressPolicy(extra_allowed=(("127.0.0.1", 9),))
    with pytest.raises(Unavailable) as refused:
        # a port nothing listens on: refused at once, no network needed
        await on.platform.repos.connect(
            on.alice, app_id, "https://127.0.0.1:9/o/r.git", token=TOKEN
        )
    assert TOKEN not in str(refused.value)
    assert TOKEN not in caplog.text
    with pytest.raises(InvalidArgument, match="git:// is not allowed"):
        await on.platform.repos.connect(on.alice, app_id, "git://127.0.0.1:9/r", token=TOKEN)


async def test_a_token_is_stored_sealed(on: OnFakes, storage: Storage, repo: BareRepo) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    store = on.platform.repos._store
    await store.put(
        app_id=app_id,
        url="https://example.com/o/r.git",
        token=on.platform.repos._sealer.seal(TOKEN),
        branch="main",
        webhook_secret=on.platform.repos._sealer.seal("s"),
        auto_deploy=False,
        connected_by="alice",
    )
    async with storage.engine.connect() as conn:
        rows = (await conn.execute(sa.select(repo_connections))).all()
    assert rows
    assert all(TOKEN not in repr(tuple(r)) for r in rows)
    view = await on.platform.repos.get(on.alice, app_id)
    assert view.has_token
    assert TOKEN not in repr(view)


async def test_a_repository_without_commits_cannot_be_connected(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    empty = bare_repo(on.source.parent, "empty.git")
    with pytest.raises(FailedPrecondition, match="no branch"):
        await on.platform.repos.connect(on.alice, app_id, str(empty.bare))


async def test_preflight_takes_a_connected_repository_as_the_source(
    on: OnFakes, repo: BareRepo
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop", {"run_command": "x"})).app.id
    before = await on.platform.preflight.check(on.alice, app_id)
    assert [c.status for c in before.checks if c.name == "source"] == ["fail"]
    await on.platform.repos.connect(on.alice, app_id, str(repo.bare))
    after = await on.platform.preflight.check(on.alice, app_id)
    [source] = [c for c in after.checks if c.name == "source"]
    assert (source.status, source.detail) == ("pass", f"the connected repository {repo.bare}")
