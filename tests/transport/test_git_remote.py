"""Each app's git remote, driven by the real git client over HTTP against a real uvicorn on a
free port, with git http-backend in the app's real sandbox: a push to the connected branch is
deployed (after CI when configured), a clone reads it back, another tenant's token (or none,
or one without the scope) is refused without saying whether the app exists."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette

from appdeck.auth.bearer import BearerAuthenticator
from appdeck.auth.throttle import FailureThrottle
from appdeck.auth.tokens import InvalidToken
from appdeck.platform.deploy import states
from appdeck.platform.repos.hosted import HostedLimits
from appdeck.platform.repos.inline import InlineFile
from appdeck.storage import Storage
from appdeck.storage.identity import IdentityStore
from appdeck.transport.git_remote import git_remote_route
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.support.sandbox import sandbox_or_skip
from tests.support.wait import until

UID_BASE = 240_000
FREE_FAILURES = 5
SPEC = {"run_command": "python3 app.py"}
GREEN = 'test "$(cat status)" = green'
_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "Laptop",
    "GIT_AUTHOR_EMAIL": "dev@laptop.test",
    "GIT_COMMITTER_NAME": "Laptop",
    "GIT_COMMITTER_EMAIL": "dev@laptop.test",
}


class _NoJwt:
    """PATs only: these tests sign in with personal access tokens."""

    async def verify(self, token: str) -> dict[str, Any]:
        raise InvalidToken("no JWTs here")

    async def close(self) -> None:
        return None


@dataclass
class Remote:
    on: OnFakes
    base: str
    alice: str
    """alice's token (acme admin): repos:write."""
    reader: str
    """alice's token with repos:read only."""
    eve: str
    """eve's token (globex admin): repos:write."""
    apps_only: str
    """alice's token without a repos scope."""

    def url(self, token: str, tenant: str = "acme", app: str = "shop") -> str:
        return f"{self.base.replace('http://', f'http://x:{token}@')}/git/{tenant}/{app}.git"


@pytest.fixture
async def remote(storage: Storage, tmp_path: Path) -> AsyncIterator[Remote]:
    sandbox = sandbox_or_skip(UID_BASE)
    limits = HostedLimits(max_push_bytes=4 << 20, max_repo_bytes=16 << 20, timeout_s=60)
    on = await platform_on_fakes(storage, tmp_path, sandbox=sandbox, hosted=limits)
    assert on.platform.hosting is not None
    bearer = BearerAuthenticator(
        verifier=_NoJwt(),
        identities=IdentityStore(storage.engine),
        resource_metadata_url="http://127.0.0.1/.well-known/oauth-protected-resource",
    )
    tokens = [
        (await on.admin.create_pat(tenant, user, scope))[0]
        for tenant, user, scope in (
            ("acme", "alice", "repos:write deploy:write"),
            ("acme", "alice", "repos:read"),
            ("globex", "eve", "repos:write deploy:write"),
            ("acme", "alice", "apps:read apps:write"),
        )
    ]
    throttle = FailureThrottle(free=FREE_FAILURES, window=60)
    app = Starlette(routes=[git_remote_route(on.platform.hosting, bearer, throttle)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    await until(lambda: server.started, within=10)
    try:
        yield Remote(on, f"http://127.0.0.1:{sock.getsockname()[1]}", *tokens)
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
        sock.close()
        await on.platform.repos.settle()
        await on.platform.ci.settle()


async def git(*args: str, cwd: Path, check: bool = True) -> tuple[int, str]:
    """The git client, as a laptop runs it (async: the server runs in this loop)."""
    proc = await asyncio.create_subprocess_exec(
        "git", *args, cwd=cwd, env=_ENV,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text = out.decode(errors="replace")
    assert not check or proc.returncode == 0, text
    return proc.returncode or 0, text


async def laptop(tmp_path: Path, files: dict[str, str]) -> Path:
    work = tmp_path / "laptop"
    work.mkdir(exist_ok=True)
    await git("init", "-q", "-b", "main", cwd=work)
    await commit(work, files, "first")
    return work


async def commit(work: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (work / name).write_text(text)
    await git("add", "-A", cwd=work)
    await git("commit", "-q", "-m", message, cwd=work)
    return (await git("rev-parse", "HEAD", cwd=work))[1].strip()


async def connected(remote: Remote, **options: Any) -> int:
    on = remote.on
    app_id = (await on.platform.apps.register(on.alice, "shop", SPEC)).app.id
    await on.platform.repos.connect(on.alice, app_id, "hosted", **options)
    return app_id


async def deployments(on: OnFakes, app_id: int) -> list[Any]:
    return await on.platform.deploys.store.for_app(app_id, offset=0, limit=10)


async def test_a_git_push_to_the_connected_branch_deploys_that_commit(
    remote: Remote, tmp_path: Path
) -> None:
    on = remote.on
    app_id = await connected(remote, auto_deploy=True)
    work = await laptop(tmp_path, {"app.py": "print('v1')\n"})
    sha = (await git("rev-parse", "HEAD", cwd=work))[1].strip()
    _, said = await git("push", remote.url(remote.alice), "main", cwd=work)
    assert "remote: AppDeck: a push to the app's connected branch is tested" in said
    await on.platform.repos.settle()
    [record] = await deployments(on, app_id)
    assert (record.state, record.source["commit"]) == (states.LIVE, sha)
    assert Path(record.source["path"], "app.py").read_text() == "print('v1')\n"  # noqa: ASYNC240
    repo = on.platform.hosting.hosted.path(app_id)  # type: ignore[union-attr]
    owner = os.stat(repo / "objects").st_uid
    assert owner == UID_BASE + app_id  # written by the app's uid, not root
    assert stat.S_IMODE(os.stat(repo).st_mode) == 0o700
    other = await commit(work, {"app.py": "print('v2')\n"}, "v2")
    await git("push", "-q", remote.url(remote.alice), "main:other", cwd=work)
    await on.platform.repos.settle()
    assert len(await deployments(on, app_id)) == 1  # another branch: no push event
    await git("push", "-q", remote.url(remote.alice), "main", cwd=work)
    await on.platform.repos.settle()
    newest = (await deployments(on, app_id))[0]
    assert (newest.state, newest.source["commit"]) == (states.LIVE, other)


async def test_with_ci_a_pushed_commit_is_tested_green_before_it_is_deployed(
    remote: Remote, tmp_path: Path
) -> None:
    on = remote.on
    app_id = await connected(remote)
    await on.platform.ci.configure(on.alice, app_id, test_command=GREEN, auto_deploy=True)
    work = await laptop(tmp_path, {"app.py": "print('v1')\n", "status": "red\n"})
    await git("push", "-q", remote.url(remote.alice), "main", cwd=work)
    await on.platform.ci.settle()
    [red] = await on.platform.ci.runs(on.alice, app_id, offset=0, limit=10)
    assert (red.state, red.trigger) == ("failed", "push")
    assert await deployments(on, app_id) == []  # red: not deployed
    sha = await commit(work, {"status": "green\n"}, "fixed")
    await git("push", "-q", remote.url(remote.alice), "main", cwd=work)
    await on.platform.ci.settle()
    await on.platform.repos.settle()
    green = (await on.platform.ci.runs(on.alice, app_id, offset=0, limit=10))[0]
    assert (green.state, green.commit) == ("passed", sha)
    [deployed] = await deployments(on, app_id)  # CI's deploy was awaited by ci.settle
    assert (deployed.state, deployed.source["commit"]) == (states.LIVE, sha)


async def test_a_clone_with_a_read_token_gets_what_was_pushed(
    remote: Remote, tmp_path: Path
) -> None:
    await connected(remote)
    work = await laptop(tmp_path, {"app.py": "print('v1')\n"})
    await git("push", "-q", remote.url(remote.alice), "main", cwd=work)
    await git("clone", "-q", remote.url(remote.reader), str(tmp_path / "copy"), cwd=tmp_path)
    assert (tmp_path / "copy" / "app.py").read_text() == "print('v1')\n"
    code, said = await git("push", remote.url(remote.reader), "main", cwd=work, check=False)
    assert code != 0
    assert "403" in said  # a read token does not push


async def test_another_tenants_token_is_refused_like_a_missing_app(
    remote: Remote, tmp_path: Path
) -> None:
    on = remote.on
    app_id = await connected(remote, auto_deploy=True)
    work = await laptop(tmp_path, {"app.py": "print('evil')\n"})
    code, said = await git("push", remote.url(remote.eve), "main", cwd=work, check=False)
    assert code != 0
    assert "not found" in said.lower()
    assert await deployments(on, app_id) == []
    refs = "/git/acme/{}.git/info/refs?service=git-receive-pack"
    async with httpx.AsyncClient(base_url=remote.base, timeout=30) as client:
        answers = [
            await client.get(refs.format(app), auth=("x", remote.eve)) for app in ("shop", "nope")
        ]
        assert [a.status_code for a in answers] == [404, 404]
        assert answers[0].text == answers[1].text  # the same answer: existence not told
        anonymous = await client.get(refs.format("shop"))
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Basic realm=")
        wrong = await client.get(refs.format("shop"), auth=("x", "adk_pat_nope"))
        assert wrong.status_code == 401
        unscoped = await client.get(refs.format("shop"), auth=("x", remote.apps_only))
        assert unscoped.status_code == 403
        dumb = await client.get("/git/acme/shop.git/HEAD", auth=("x", remote.alice))
        assert dumb.status_code == 404  # only the smart protocol is served
    assert await _status_of_announced_body(remote, 5 << 20) == 413  # before any byte is read


async def _status_of_announced_body(remote: Remote, length: int) -> int:
    """The status of a push announcing ``length`` bytes and sending none."""
    host, port = remote.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    basic = base64.b64encode(f"x:{remote.alice}".encode()).decode()
    writer.write(
        f"POST /git/acme/shop.git/git-receive-pack HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Basic {basic}\r\nContent-Length: {length}\r\n\r\n".encode()
    )
    await writer.drain()
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
    finally:
        writer.close()
    return int(line.split()[1])


async def test_a_push_over_the_size_limit_is_refused_and_deploys_nothing(
    remote: Remote, tmp_path: Path
) -> None:
    on = remote.on
    app_id = await connected(remote, auto_deploy=True)
    work = await laptop(tmp_path, {"app.py": "print('v1')\n"})
    (work / "medium").write_bytes(os.urandom(2 << 20))  # over git's 1 MiB post buffer: chunked
    sha = await commit(work, {}, "medium")
    await git("push", "-q", remote.url(remote.alice), "main", cwd=work)
    await on.platform.repos.settle()
    [record] = await deployments(on, app_id)
    assert (record.state, record.source["commit"]) == (states.LIVE, sha)
    (work / "blob").write_bytes(os.urandom(6 << 20))  # incompressible, over 4 MiB
    await git("add", "blob", cwd=work)
    await git("commit", "-q", "-m", "big", cwd=work)
    code, _ = await git("push", remote.url(remote.alice), "main", cwd=work, check=False)
    assert code != 0
    await on.platform.repos.settle()
    assert len(await deployments(on, app_id)) == 1  # the refused push deployed nothing
    hosting = on.platform.hosting
    assert hosting is not None
    assert hosting.hosted.size(app_id) < 4 << 20  # the 2 MiB pack, not the refused one


async def test_refused_tokens_make_the_address_wait_but_git_asking_first_does_not(
    remote: Remote,
) -> None:
    await connected(remote)
    refs = "/git/acme/shop.git/info/refs?service=git-upload-pack"
    async with httpx.AsyncClient(base_url=remote.base, timeout=30) as client:
        for _ in range(3 * FREE_FAILURES):  # no credentials: git's first request, not counted
            assert (await client.get(refs)).status_code == 401
        good = await client.get(refs, auth=("x", remote.alice))
        assert good.status_code == 200
        for _ in range(FREE_FAILURES + 1):
            assert (await client.get(refs, auth=("x", "adk_pat_wrong"))).status_code == 401
        waiting = await client.get(refs, auth=("x", remote.alice))
        assert waiting.status_code == 429
        assert int(waiting.headers["retry-after"]) >= 1


async def test_a_client_that_stalls_mid_push_is_cut_and_frees_the_push_slot(
    remote: Remote,
) -> None:
    await connected(remote)
    hosting = remote.on.platform.hosting
    assert hosting is not None
    hosting.hosted.limits = replace(hosting.limits, timeout_s=2)  # this test's own deadline
    host, port = remote.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    basic = base64.b64encode(f"x:{remote.alice}".encode()).decode()
    writer.write(
        f"POST /git/acme/shop.git/git-receive-pack HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Basic {basic}\r\nContent-Length: 1000\r\n\r\n0000".encode()
    )  # 4 of the 1000 bytes announced, then nothing
    await writer.drain()
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
    finally:
        writer.close()
    assert int(line.split()[1]) == 408
    async with httpx.AsyncClient(base_url=remote.base, timeout=30) as client:
        refs = "/git/acme/shop.git/info/refs?service=git-receive-pack"
        again = await client.get(refs, auth=("x", remote.alice))
    assert again.status_code == 200  # the slot of the stalled push was given back


async def test_only_branches_and_tags_within_bounds_are_pushed(
    remote: Remote, tmp_path: Path
) -> None:
    await connected(remote)
    work = await laptop(tmp_path, {"app.py": "print('v1')\n"})
    url = remote.url(remote.alice)
    await git("push", "-q", url, "main", "HEAD:refs/tags/v1", cwd=work)
    code, said = await git("push", url, "HEAD:refs/odd/x", cwd=work, check=False)
    assert code != 0
    assert "only branches and tags may be pushed" in said
    code, said = await git("push", url, f"HEAD:refs/heads/{'b' * 190}/{'c' * 20}", cwd=work,
                           check=False)  # fmt: skip
    assert code != 0
    assert "longer than 200 characters" in said
    many = [f"HEAD:refs/heads/n{i}" for i in range(101)]
    code, said = await git("push", url, *many, cwd=work, check=False)
    assert code != 0
    assert "more than 100 refs" in said
    _, listed = await git("ls-remote", url, cwd=work)
    assert sorted(line.split("\t")[1] for line in listed.splitlines()) == [
        "HEAD", "refs/heads/main", "refs/tags/v1",
    ]  # fmt: skip


async def test_git_asking_before_a_push_is_no_push_event_only_the_push_is(
    remote: Remote, tmp_path: Path
) -> None:
    """The branch holds a commit no push brought (inline files): git's GET info/refs before a
    push does not deploy it; the push deploys the pushed commit, once."""
    on = remote.on
    app_id = await connected(remote)
    assert on.platform.hosting is not None
    first = [InlineFile("app.py", "print('v1')\n", "utf-8")]
    await on.platform.hosting.commit_files(on.alice, app_id, first)
    await on.platform.repos.connect(on.alice, app_id, "hosted", auto_deploy=True)
    work = tmp_path / "work"
    await git("clone", "-q", remote.url(remote.alice), str(work), cwd=tmp_path)
    sha = await commit(work, {"app.py": "print('v2')\n"}, "v2")
    await git("push", "-q", remote.url(remote.alice), "main", cwd=work)
    await on.platform.repos.settle()
    [record] = await deployments(on, app_id)
    assert (record.state, record.source["commit"]) == (states.LIVE, sha)
