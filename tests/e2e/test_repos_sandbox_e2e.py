"""Issue 19 findings 1 and 2 through a real server (sandboxed builds): tenant ``other`` (t2)
points ``connect_repo`` at repositories in its own source root that lead, through git's own
indirections, to the data dir's secret key, ``/etc/shadow``, tenant ``dev``'s (t1's)
repository and the platform's repo cache. Nothing of it may reach t2: every connect fails
cleanly, in the platform's words, and no deploy serves t1's files."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.e2e.conftest import Launcher, reap_apps
from tests.e2e.helpers import official_client
from tests.platform.repos.gitrepo import bare_repo, git
from tests.support.appdeck_process import (
    AppDeckProcess,
    run_appdeck,
    start_appdeck,
)

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
SPEC = {"run_command": "python3 app.py", "health_check": {"path": "/healthz", "timeout_s": 2}}
MARKER = "t1-private-marker-7c1f"
"""A string only tenant t1's repository holds."""


def _other_token(server: AppDeckProcess, env: dict[str, str]) -> str:
    """A token of an admin of tenant ``other`` (t2), made with the CLI."""

    def cli(*args: str) -> str:
        done = run_appdeck(*args, "--data-dir", str(server.data_dir), env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("tenant", "create", "other")
    cli("user", "create", "--tenant", "other", "--name", "eve", "--role", "admin")
    scopes = "apps:read apps:write deploy:read deploy:write repos:write"
    made = cli("token", "create", "--tenant", "other", "--user", "eve", "--scope", scopes, "--json")
    return str(json.loads(made)["token"])


def _work_repo(path: Path, files: dict[str, str]) -> str:
    """A non-bare repository at ``path`` with one commit of ``files`` on main; its sha."""
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=path)
    for name, text in files.items():
        (path / name).write_text(text)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "one", cwd=path)
    return git("rev-parse", "HEAD", cwd=path)


def _alternates_repo(path: Path, objects: Path, sha: str) -> None:
    """A bare repository with no object of its own: main is ``sha``, its objects are borrowed
    from ``objects`` (``objects/info/alternates``)."""
    git("init", "-q", "--bare", "-b", "main", str(path), cwd=path.parent)
    (path / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    (path / "refs" / "heads" / "main").write_text(f"{sha}\n")


def _packed_refs_link(path: Path, target: Path) -> None:
    """A repository whose ``.git/packed-refs`` is a link to ``target``."""
    _work_repo(path, {"app.py": "print('hi')\n"})
    git("pack-refs", "--all", cwd=path)
    packed = path / ".git" / "packed-refs"
    packed.unlink()
    packed.symlink_to(target)


async def _call(client: Client, name: str, args: dict[str, Any]) -> tuple[bool, str, Any]:
    """Whether the call failed, everything the caller saw (text), the structured content."""
    result = await client.call_tool(name, args)
    seen = json.dumps(result.structured_content) + " ".join(
        getattr(block, "text", "") for block in result.content
    )
    return result.is_error, seen, result.structured_content


async def _start(launch: Launcher, tmp_path: Path) -> tuple[AppDeckProcess, AppDeckProcess, Path]:
    roots = tmp_path / "src"
    env = {"APPDECK_SOURCE_ROOTS": str(roots / "{tenant}"), "APPDECK_SANDBOX": "on"}
    server = await launch(env=env)
    token = await asyncio.to_thread(_other_token, server, env)
    return server, dataclasses.replace(server, token=token), roots


@pytest.mark.e2e
async def test_a_packed_refs_link_to_the_secret_key_or_shadow_is_refused_and_not_echoed(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    server, other, roots = await _start(launch_appdeck, tmp_path)
    key = server.data_dir / "keys" / "secret.key"
    t2 = roots / "other"
    _packed_refs_link(t2 / "pk", key)
    _packed_refs_link(t2 / "shadow", Path("/etc/shadow"))
    async with asyncio.timeout(120), official_client(other) as client:
        _, _, app = await _call(client, "register_app", {"name": "pk", "spec": SPEC})
        assert key.is_file()  # the first sealed value made it: it exists to be stolen
        secret = key.read_bytes().decode(errors="replace").strip()
        shadow = (await asyncio.to_thread(Path("/etc/shadow").read_text)).splitlines()[0]
        for repo in ("pk", "shadow"):
            url = f"file://{t2 / repo}"
            args = {"action": "connect", "app_id": app["app_id"], "url": url}
            failed, seen, content = await _call(client, "connect_repo", args)
            assert failed, seen
            assert secret not in seen
            assert secret[:12] not in seen
            assert shadow not in seen
            assert shadow.split(":")[0] + ":" not in seen
            assert str(server.data_dir) not in seen
            assert content["error"]["code"] in ("invalid_argument", "unavailable")
            assert "symbolic link" in content["error"]["message"], content


@pytest.mark.e2e
async def test_a_repository_borrowing_another_tenants_or_the_caches_objects_is_refused(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    server, other, roots = await _start(launch_appdeck, tmp_path)
    t1_repo = bare_repo(roots / "dev", "shop.git")
    app_py = HELLO.joinpath("app.py").read_text().replace('"v1"', f'"{MARKER}"')
    t1_head = t1_repo.commit({"app.py": app_py}, "t1's app")
    t2 = roots / "other"
    t2.mkdir(parents=True)
    cache = server.data_dir / "repos" / "1.git"
    async with asyncio.timeout(240), official_client(server) as t1:
        _, _, mine = await _call(t1, "register_app", {"name": "shop", "spec": SPEC})
        assert mine["app_id"] == 1
        url = f"file://{t1_repo.bare}"
        failed, seen, _ = await _call(
            t1, "connect_repo", {"action": "connect", "app_id": 1, "url": url}
        )
        assert not failed, seen
    if not cache.is_dir():  # what the cache holds for a repository fetched over https
        cache.parent.mkdir(parents=True, exist_ok=True)
        git("clone", "-q", "--bare", str(t1_repo.bare), str(cache), cwd=cache.parent)
    (t2 / "gitdir").mkdir()
    (t2 / "gitdir" / ".git").write_text(f"gitdir: {t1_repo.bare}\n")
    (t2 / "linked").mkdir()
    (t2 / "linked" / ".git").symlink_to(t1_repo.bare)
    _alternates_repo(t2 / "borrow.git", t1_repo.bare / "objects", t1_head)
    _alternates_repo(t2 / "cache.git", cache / "objects", t1_head)
    async with asyncio.timeout(300), official_client(other) as client:
        for name, why in (
            ("gitdir", ".git is a file"),
            ("linked", ".git is a symbolic link"),
            ("borrow.git", "alternates"),
            ("cache.git", "alternates"),
        ):
            label = name.removesuffix(".git")
            _, seen, app = await _call(client, "register_app", {"name": label, "spec": SPEC})
            assert "app_id" in app, seen
            args = {"action": "connect", "app_id": app["app_id"], "url": f"file://{t2 / name}"}
            failed, seen, content = await _call(client, "connect_repo", args)
            assert failed, (name, seen)
            assert why in content["error"]["message"], (name, content)
            assert str(server.data_dir) not in seen
            assert str(t1_repo.bare) not in seen
            failed, seen, _ = await _call(client, "deploy_app", {"app_id": app["app_id"]})
            assert failed, (name, seen)
            assert MARKER not in seen
    assert not any(
        MARKER in path.read_text(errors="replace")
        for path in (server.data_dir / "runtime").rglob("app.py")
        if "/apps/1/" not in str(path) and path.is_file()
    )


@pytest.mark.e2e
async def test_with_the_default_relative_data_dir_a_connected_repo_deploys(
    tmp_path: Path,
) -> None:
    """Issue 20 item 5: ``make run``'s data dir is ``.appdeck``, relative to the server's
    working directory; connect_repo -> deploy_app must go live with it."""
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "src"
    repo = bare_repo(root, "hello.git")
    first = repo.commit({"app.py": HELLO.joinpath("app.py").read_text()}, "hello v1")
    env = {"APPDECK_SOURCE_ROOTS": str(root)}
    server = await start_appdeck(Path(".appdeck"), log_dir=tmp_path / "logs", env=env, cwd=home)
    try:
        async with asyncio.timeout(180), official_client(server) as client:
            _, _, app = await _call(client, "register_app", {"name": "hello", "spec": SPEC})
            args = {"action": "connect", "app_id": app["app_id"], "url": f"file://{repo.bare}"}
            failed, seen, _ = await _call(client, "connect_repo", args)
            assert not failed, seen
            args = {"app_id": app["app_id"], "wait_seconds": 60}
            failed, seen, live = await _call(client, "deploy_app", args)
            assert not failed, seen
            assert live["state"] == "live", seen
            assert live["source"]["commit"] == first
            assert "InvalidArgument" not in seen
    finally:
        await server.stop()
        reap_apps(home)
    assert (home / ".appdeck" / "keys").is_dir()
