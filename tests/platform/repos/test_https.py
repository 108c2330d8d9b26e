"""The https path for real: a loopback smart-HTTP git server (``git http-backend`` behind TLS,
a token required; tests/support/git_http.py) that git reaches through the Git runner's
``ca_file`` and a loopback exception in its egress policy, as it would reach GitHub."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from appdeck.common.errors import Unavailable
from appdeck.platform.deploy import states
from appdeck.platform.repos.git import Git, Limits
from appdeck.runtime.egress import EgressPolicy
from appdeck.storage import Storage
from appdeck.storage.schema import repo_connections
from tests.platform.on_fakes import OnFakes
from tests.platform.repos.gitrepo import BareRepo, bare_repo
from tests.platform.repos.payloads import push_payload, sign
from tests.support.git_http import GitHttpServer, git_http_server

TOKEN = "ghp_httpsT0kenThatMustNeverShow0123"
SPEC = {"run_command": "python3 app.py"}


@pytest.fixture
def repo(tmp_path: Path) -> BareRepo:
    made = bare_repo(tmp_path / "served")
    made.commit({"app.py": "print('v1')\n"}, "first version")
    made.commit({"x.txt": "x"}, "on dev", branch="dev")
    return made


@pytest.fixture
def server(tmp_path: Path, repo: BareRepo) -> Iterator[GitHttpServer]:
    with git_http_server(repo.bare.parent, token=TOKEN, certificates=tmp_path / "tls") as made:
        yield made


def _use(on: OnFakes, server: GitHttpServer, tmp_path: Path, limits: Limits | None = None) -> None:
    """Git as the server builds it, but trusting the test CA and allowed this loopback port."""
    on.platform.repos.sources.git = Git(
        tmp_path / "repos",
        limits,
        policy=EgressPolicy(extra_allowed=(("127.0.0.1", server.port),)),
        ca_file=server.ca_file,
    )


async def test_the_right_token_lists_branches_and_a_push_deploys_over_https(
    on: OnFakes, server: GitHttpServer, repo: BareRepo, tmp_path: Path, storage: Storage
) -> None:
    _use(on, server, tmp_path)
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    repos = on.platform.repos
    done = await repos.connect(
        on.alice, app_id, server.url("shop.git"), token=TOKEN, auto_deploy=True
    )
    assert done.repo.branch == "main"
    assert done.repo.has_token
    names = [(b.name, b.default) for b in await repos.branches(on.alice, app_id)]
    assert names == [("dev", False), ("main", True)]
    sha = repo.commit({"app.py": "print('v2')\n"}, "Ship v2 over https")
    body = push_payload(sha, "Ship v2 over https")
    outcome = await repos.push(app_id, body, sign(done.webhook_secret, body), "push")
    assert (outcome.status, outcome.commit) == ("deploying", sha)
    await repos.settle()
    [record] = await on.platform.deploys.store.for_app(app_id, offset=0, limit=10)
    assert record.state == states.LIVE
    assert record.source["commit"] == sha
    assert record.source["message"] == "Ship v2 over https"
    assert Path(record.source["path"], "app.py").read_text() == "print('v2')\n"  # noqa: ASYNC240
    assert server.requests
    assert all(authorised for _, _, authorised in server.requests)
    async with storage.engine.connect() as conn:
        rows = (await conn.execute(sa.select(repo_connections))).all()
    assert rows
    assert all(TOKEN not in repr(tuple(row)) for row in rows)  # sealed at rest
    assert rows[0].token is not None


@pytest.mark.parametrize("token", [None, "ghp_wrongTokenAltogether000000000"])
async def test_no_token_or_a_wrong_one_is_a_clear_error_that_never_shows_a_token(
    on: OnFakes,
    server: GitHttpServer,
    tmp_path: Path,
    token: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    _use(on, server, tmp_path)
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    with pytest.raises(Unavailable, match="refused the credentials") as refused:
        await on.platform.repos.connect(on.alice, app_id, server.url("shop.git"), token=token)
    shown = f"{refused.value.message} {refused.value.hint}"
    for secret in (TOKEN, token or TOKEN):
        assert secret not in shown
        assert secret not in caplog.text
    assert server.requests
    assert not any(authorised for _, _, authorised in server.requests)


async def test_git_does_not_trust_a_ca_it_was_not_given(
    on: OnFakes, server: GitHttpServer, tmp_path: Path
) -> None:
    on.platform.repos.sources.git = Git(
        tmp_path / "repos", policy=EgressPolicy(extra_allowed=(("127.0.0.1", server.port),))
    )
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    with pytest.raises(Unavailable) as refused:
        await on.platform.repos.connect(on.alice, app_id, server.url("shop.git"), token=TOKEN)
    assert TOKEN not in refused.value.message
    assert server.requests == []  # the handshake failed: no request, no header sent


async def test_a_server_that_redirects_is_refused(
    on: OnFakes, tmp_path: Path, repo: BareRepo
) -> None:
    other = bare_repo(tmp_path / "served", "other.git")
    other.commit({"a": "a"}, "elsewhere")
    with git_http_server(
        repo.bare.parent, token=TOKEN, certificates=tmp_path / "tls", redirect_to="other.git"
    ) as server:
        _use(on, server, tmp_path)
        app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
        with pytest.raises(Unavailable) as refused:
            await on.platform.repos.connect(on.alice, app_id, server.url("shop.git"), token=TOKEN)
    assert TOKEN not in refused.value.message
    asked = [path for _, path, _ in server.requests]
    assert asked
    assert all(path.startswith("/shop.git/") for path in asked)  # never followed


async def test_a_server_that_stalls_meets_the_time_limit(
    on: OnFakes, tmp_path: Path, repo: BareRepo
) -> None:
    with git_http_server(
        repo.bare.parent, token=TOKEN, certificates=tmp_path / "tls", stall=True
    ) as server:
        _use(on, server, tmp_path, Limits(timeout_s=1.0))
        app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
        with pytest.raises(Unavailable, match="longer than 1 s"):
            await on.platform.repos.connect(on.alice, app_id, server.url("shop.git"), token=TOKEN)
