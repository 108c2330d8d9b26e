"""The GitHub adapter, checked against GitHub's published REST description (vendored subset of
@octokit/openapi in tests/fixtures/github/) through an httpx mock transport. NOT exercised
against github.com."""

from __future__ import annotations

import json
import logging
import ssl
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from appdeck.common import outbound_tls
from appdeck.common.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from appdeck.common.identity import Principal
from appdeck.platform.deploy.deployments import DeploymentView
from appdeck.platform.pushes import PushPolicy
from appdeck.platform.repos.github import GitHub, github_repository
from appdeck.platform.repos.service import PushOutcome, Received
from tests.platform.on_fakes import OnFakes
from tests.platform.repos.openapi import REPOS, STATUS, FakeGitHub, Operation, documented

TOKEN = "ghp_adapterTokenNeverLogged0123456789"
SHA = "6dcb09b5b57875f334f61aebed695e2e4193db5e"


@pytest.fixture
def fake() -> FakeGitHub:
    return FakeGitHub([STATUS, REPOS], documented)


async def test_a_commit_status_request_matches_the_published_schema(fake: FakeGitHub) -> None:
    github = GitHub(transport=fake.transport)
    await github.create_status(
        TOKEN,
        "octocat",
        "Hello-World",
        SHA,
        state="success",
        context="appdeck/ci",
        description="tests passed\nin 3 s " + "x" * 300,
        target_url="https://appdeck.example/apps/1/ci/4",
    )
    [request] = fake.seen
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    body = json.loads(request.content)
    assert body["description"].startswith("tests passed in 3 s")  # no control characters
    assert len(body["description"]) == 140
    assert (body["state"], body["context"]) == ("success", "appdeck/ci")


@pytest.mark.parametrize(
    ("owner", "state", "context", "sha"),
    [
        ("../x", "success", "appdeck/ci", SHA),
        ("octocat", "green", "appdeck/ci", SHA),
        ("octocat", "success", "other/ci", SHA),
        ("octocat", "success", "appdeck/ci", "abc"),
        ("octocat", "success", "appdeck/ci", SHA + "\n"),
    ],
)
async def test_a_bad_status_is_refused_before_any_request(
    fake: FakeGitHub, owner: str, state: str, context: str, sha: str
) -> None:
    github = GitHub(transport=fake.transport)
    with pytest.raises(InvalidArgument):
        await github.create_status(
            TOKEN, owner, "r", sha, state=state, context=context, description="d"
        )
    with pytest.raises(InvalidArgument, match="target_url"):
        await github.create_status(
            TOKEN, "o", "r", SHA, state="error", context="appdeck/deploy", description="d",
            target_url="http://plain.example/x",
        )  # fmt: skip
    assert fake.seen == []


async def test_the_repo_list_follows_link_pages_and_parses_the_documented_shape(
    fake: FakeGitHub,
) -> None:
    repos = await GitHub(transport=fake.transport).repos(TOKEN)
    assert [(r.full_name, r.private) for r in repos] == [
        ("octocat/repo-1", False),
        ("octocat/repo-2", True),
    ]
    assert all(r.clone_url.startswith("https://") for r in repos)
    assert [r.url.params.get("page") for r in fake.seen] == [None, "2"]


async def test_pages_are_bounded_and_a_link_to_another_origin_is_not_followed() -> None:
    def endless(request: httpx.Request, operation: Operation) -> httpx.Response:
        page = int(request.url.params.get("page", "1"))
        link = f'<https://api.github.com/user/repos?page={page + 1}>; rel="next"'
        return httpx.Response(200, json=[], headers={"Link": link})

    fake = FakeGitHub([REPOS], endless)
    assert await GitHub(transport=fake.transport, max_pages=3).repos(TOKEN) == []
    assert len(fake.seen) == 3

    for link in (
        '<https://evil.example/user/repos?page=2>; rel="next"',
        '<https://api.github.com@evil.example/user/repos?page=2>; rel="next"',
        '<http://api.github.com/user/repos?page=2>; rel="next"',
        '<https://api.github.com/user/emails>; rel="next"',
    ):
        fake = FakeGitHub(
            [REPOS], lambda r, o, link=link: httpx.Response(200, json=[], headers={"Link": link})
        )
        assert await GitHub(transport=fake.transport).repos(TOKEN) == []
        assert len(fake.seen) == 1  # the token went nowhere else


@pytest.mark.parametrize(
    ("code", "error", "says"),
    [
        (401, FailedPrecondition, "refused the token"),
        (403, FailedPrecondition, "refused the token"),
        (404, NotFound, "no such repository"),
        (422, InvalidArgument, "invalid"),
        (500, Unavailable, "HTTP 500"),
        (301, Unavailable, "HTTP 301"),  # a redirect is not followed
    ],
)
async def test_errors_are_clear_and_never_carry_the_token(
    code: int, error: type[Exception], says: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    headers = {"Location": "https://evil.example/"} if code == 301 else {}

    def failing(request: httpx.Request, operation: Operation) -> httpx.Response:
        return httpx.Response(code, json={"message": f"nope {TOKEN}"}, headers=headers)

    fake = FakeGitHub([STATUS, REPOS], failing)
    with pytest.raises(error, match=says) as refused:
        await GitHub(transport=fake.transport).repos(TOKEN)
    assert TOKEN not in str(refused.value)
    assert TOKEN not in caplog.text
    assert len(fake.seen) == 1


async def test_a_timeout_or_an_oversized_answer_is_unavailable() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(Unavailable, match="in time"):
        await GitHub(transport=httpx.MockTransport(slow)).repos(TOKEN)

    def huge(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"[" + b" " * 5000 + b"]")

    with pytest.raises(Unavailable, match="over 1000 bytes"):
        await GitHub(transport=httpx.MockTransport(huge), max_bytes=1000).repos(TOKEN)
    with pytest.raises(ValueError, match="https only"):
        GitHub("http://api.github.com")


@pytest.mark.parametrize(
    ("url", "found"),
    [
        ("https://github.com/octocat/Hello-World.git", ("octocat", "Hello-World")),
        ("https://github.com/octocat/Hello-World", ("octocat", "Hello-World")),
        ("https://GitHub.com/o/r/", ("o", "r")),
        ("https://github.com:8443/o/r", None),
        ("https://gitlab.com/o/r", None),
        ("https://github.com/o/r/extra", None),
        ("https://github.com/../r", None),
        ("/srv/repos/r.git", None),
    ],
)
def test_only_github_com_https_urls_name_a_github_repository(
    url: str, found: tuple[str, str] | None
) -> None:
    assert github_repository(url) == found


async def _stored(on: OnFakes, url: str, token: str | None) -> int:
    name = f"shop{await on.platform.apps.store.count(on.alice.tenant)}"
    app_id = (await on.platform.apps.register(on.alice, name)).app.id
    repos = on.platform.repos
    await repos._store.put(
        app_id=app_id,
        url=url,
        token=repos._sealer.seal(token) if token else None,
        branch="main",
        webhook_secret=repos._sealer.seal("s"),
        auto_deploy=False,
        connected_by=on.alice.user,
    )
    return app_id


async def _on_github(on: OnFakes, fake: FakeGitHub) -> int:
    """An app connected to a github.com repository with a token; GitHub is ``fake``."""
    on.platform.repos.sources.github = GitHub(transport=fake.transport)
    return await _stored(on, "https://github.com/octocat/Hello-World.git", TOKEN)


async def test_report_status_posts_for_a_github_connection_with_a_token_only(
    on: OnFakes, fake: FakeGitHub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    repos = on.platform.repos
    app_id = await _on_github(on, fake)
    assert await repos.report_status(app_id, SHA, "pending", "appdeck/deploy", "deploying")
    assert fake.seen[-1].url.path == f"/repos/octocat/Hello-World/statuses/{SHA}"
    assert not await repos.report_status(app_id, SHA, "bogus", "appdeck/deploy", "x")
    for url, token in (("https://github.com/o/r.git", None), ("https://gitlab.com/o/r", TOKEN)):
        other = await _stored(on, url, token)
        assert not await repos.report_status(other, SHA, "success", "appdeck/ci", "ok")
    assert not await repos.report_status(app_id + 999, SHA, "success", "appdeck/ci", "ok")
    assert len(fake.seen) == 1
    assert TOKEN not in caplog.text


async def test_the_token_repo_list_needs_a_github_connection_and_the_role(
    on: OnFakes, fake: FakeGitHub
) -> None:
    repos = on.platform.repos
    app_id = await _on_github(on, fake)
    assert len(await repos.token_repos(on.alice, app_id)) == 2
    with pytest.raises(NotFound):
        await repos.token_repos(on.eve, app_id)
    plain = await _stored(on, "https://gitlab.com/o/r", TOKEN)
    with pytest.raises(FailedPrecondition, match="not a github"):
        await repos.token_repos(on.alice, plain)


async def test_a_push_deploy_reports_its_progress_as_the_deploy_status(
    on: OnFakes, fake: FakeGitHub
) -> None:
    app_id = await _on_github(on, fake)
    app = await on.platform.apps.store.get(app_id)
    assert app is not None
    outcomes: list[object] = [SimpleNamespace(live=True), SimpleNamespace(live=False), None]

    async def deploy(by: Principal, app: int, commit: str) -> DeploymentView | None:
        if not outcomes:
            raise Unavailable("the checkout failed")
        return cast("DeploymentView | None", outcomes.pop(0))

    policy = PushPolicy(on.platform.ci, deploy, on.platform.repos.sources)  # no CI configured
    for auto_deploy, answer in ((False, "recorded"), *[(True, "deploying")] * 4):
        got = Received(app, on.alice, SHA, "m", "main", "push", auto_deploy)
        assert await policy(got) == PushOutcome(answer, SHA)
        await policy.settle()
    said = [json.loads(r.content) for r in fake.seen]
    assert [(s["state"], s["context"]) for s in said] == [
        ("pending", "appdeck/deploy"),
        ("success", "appdeck/deploy"),
        ("pending", "appdeck/deploy"),
        ("failure", "appdeck/deploy"),
        ("pending", "appdeck/deploy"),
        ("error", "appdeck/deploy"),
        ("pending", "appdeck/deploy"),
        ("error", "appdeck/deploy"),
    ]
    assert said[5]["description"] == "not deployed: superseded by a newer push"
    assert said[7]["description"] == "the deploy did not run"


async def test_clients_made_per_call_build_no_tls_context_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each call makes its client; loading the CA bundle anew cost ~20 ms of CPU a call."""
    shared = outbound_tls.verified()
    built: list[object] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    github = GitHub()
    for _ in range(3):
        async with github._client(TOKEN) as client:
            assert client.base_url.scheme == "https"
    assert built == []
    assert outbound_tls.verified() is shared
