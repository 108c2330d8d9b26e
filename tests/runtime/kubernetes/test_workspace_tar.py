"""``GET /internal/releases/<id>/workspace.tar``: a built release's workspace, to its own
token only, made in the app's sandbox, with no link followed and no special file carried.

In process over ASGI (httpx's transport), with the real local driver and its real sandbox (it
is skipped, saying why, where the host cannot sandbox; it must run in CI)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import stat
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from appdeck.platform.crypto import Sealer
from appdeck.platform.workspace_tars import WorkspaceTars
from appdeck.runtime import LocalDriver, tarball
from appdeck.runtime.sandbox import Sandbox
from appdeck.transport.workspace_tar import workspace_tar_route
from tests.runtime.conftest import HELLO, build_release, kill_everything_under
from tests.support.sandbox import sandbox_or_skip
from tests.support.wait import until

UID_BASE = 310_000
APP = 41
OTHER = 42
"""Another app (think: another tenant's): its release is built too."""


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return sandbox_or_skip(UID_BASE)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """hello, plus what a tenant might leave: links in and out, a private file."""
    directory = tmp_path / "source"
    shutil.copytree(HELLO, directory)
    (directory / "lib").mkdir()
    (directory / "lib" / "data.txt").write_text("data\n")
    os.symlink("lib/data.txt", directory / "inside")
    return directory


@pytest.fixture
async def driver(tmp_path: Path, sandbox: Sandbox) -> AsyncIterator[LocalDriver]:
    runtime_dir = tmp_path / "runtime"
    runtime = LocalDriver(runtime_dir, sandbox=sandbox)
    try:
        yield runtime
    finally:
        for release_id in await runtime.releases():
            with contextlib.suppress(Exception):
                await runtime.remove(release_id)
        await runtime.detach()
        kill_everything_under(runtime_dir)


@pytest.fixture
def tars(driver: LocalDriver, tmp_path: Path) -> WorkspaceTars:
    sealer = Sealer.from_settings("a test key", tmp_path)
    return WorkspaceTars(sealer.mac, driver.workspace_tar, max_mb=1)


@pytest.fixture
async def client(tars: WorkspaceTars) -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=[workspace_tar_route(tars)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://appdeck") as http:
        yield http


async def built(driver: LocalDriver, app_id: int, source: Path) -> str:
    release = build_release(
        app_id=app_id,
        app_name=f"app{app_id}",
        source_path=source,
        runtime="command",
        run_command="exec python3 app.py",
    )
    await driver.prepare(release)
    return release.release_id


async def get(client: httpx.AsyncClient, release_id: str, token: str | None) -> httpx.Response:
    headers = {b"authorization": f"Bearer {token}".encode()} if token is not None else {}
    return await client.get(f"/internal/releases/{release_id}/workspace.tar", headers=headers)


def members(body: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as archive:
        return {member.name: member for member in archive.getmembers()}


async def test_the_release_token_gets_the_built_workspace_as_a_tar_of_its_exact_length(
    driver: LocalDriver, tars: WorkspaceTars, client: httpx.AsyncClient, source: Path
) -> None:
    release_id = await built(driver, APP, source)
    answer = await client.get(
        f"/internal/releases/{release_id}/workspace.tar",
        headers={"authorization": f"Bearer {tars.token(release_id)}"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-tar"
    assert int(answer.headers["content-length"]) == len(answer.content)
    head = await client.head(
        f"/internal/releases/{release_id}/workspace.tar",
        headers={"authorization": f"Bearer {tars.token(release_id)}"},
    )
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == answer.headers["content-length"]
    found = members(answer.content)
    assert set(found) >= {"app.py", "lib", "lib/data.txt", "inside"}
    with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:") as archive:
        app_py = archive.extractfile("app.py")
        assert app_py is not None
        assert app_py.read() == (HELLO / "app.py").read_bytes()
    assert found["inside"].issym()
    assert found["inside"].linkname == "lib/data.txt"
    for member in found.values():
        assert not member.name.startswith(("/", "../"))
        assert "/../" not in member.name
        assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "", "")
        assert member.isdir() or member.isfile() or member.issym()


async def test_tars_at_once_are_capped_and_a_closed_one_frees_its_turn(
    driver: LocalDriver, tmp_path: Path, source: Path
) -> None:
    release_id = await built(driver, APP, source)
    tars = WorkspaceTars(
        Sealer.from_settings("k", tmp_path / "key").mac, driver.workspace_tar, max_mb=1, max_open=2
    )
    token = tars.token(release_id)
    held = [await tars.open(release_id, token) for _ in range(2)]
    try:
        assert tars.open_now == 2
        app = Starlette(routes=[workspace_tar_route(tars)])
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://appdeck"
        ) as client:
            busy = await client.get(
                f"/internal/releases/{release_id}/workspace.tar",
                headers={"authorization": f"Bearer {token}"},
            )
            assert (busy.status_code, busy.headers["retry-after"]) == (503, "1")
            assert "too many workspace downloads" in busy.json()["error"]
            done = held.pop()
            await done.aclose()
            await done.aclose()  # closing twice counts once
            assert tars.open_now == 1
            answer = await client.get(
                f"/internal/releases/{release_id}/workspace.tar",
                headers={"authorization": f"Bearer {token}"},
            )
            assert answer.status_code == 200
        assert tars.open_now == 1
    finally:
        for tar in held:
            await tar.aclose()
    assert tars.open_now == 0


async def test_a_link_out_of_the_workspace_is_carried_as_a_link_never_followed(
    driver: LocalDriver, tars: WorkspaceTars, client: httpx.AsyncClient, source: Path
) -> None:
    """What the build (or a running instance) leaves in the workspace is the tenant's: a link
    to a host file goes into the tar as a link; its target's bytes never do."""
    release_id = await built(driver, APP, source)
    workspace = driver._existing(release_id).workspace  # type: ignore[union-attr]
    secret = workspace.parents[3] / "host-secret"  # in the server's runtime dir, root's
    secret.write_text("root's eyes only\n")
    os.symlink(secret, workspace / "escape")
    os.symlink("../../../../../../../../etc/shadow", workspace / "relative-escape")
    answer = await get(client, release_id, tars.token(release_id))
    assert answer.status_code == 200
    found = members(answer.content)
    assert found["escape"].issym()
    assert found["escape"].linkname == str(secret)
    assert found["relative-escape"].issym()
    assert b"root's eyes only" not in answer.content


async def test_the_tar_is_made_as_the_apps_uid_so_a_file_only_root_may_read_is_refused(
    driver: LocalDriver, tars: WorkspaceTars, client: httpx.AsyncClient, source: Path
) -> None:
    """Root could read it; the app's uid cannot: the refusal shows who reads the workspace."""
    release_id = await built(driver, APP, source)
    workspace = driver._existing(release_id).workspace  # type: ignore[union-attr]
    private = workspace / "private"
    private.write_text("root's\n")
    os.chown(private, 0, 0)
    private.chmod(0o600)
    answer = await get(client, release_id, tars.token(release_id))
    assert answer.status_code == 503
    assert "cannot be read by the app" in answer.json()["error"]


async def test_a_workspace_over_the_limit_is_refused_before_a_byte_of_it(
    driver: LocalDriver, tars: WorkspaceTars, client: httpx.AsyncClient, source: Path
) -> None:
    (source / "big.bin").write_bytes(os.urandom(1024 * 1024 + 1))  # the limit is 1 MiB
    release_id = await built(driver, APP, source)
    answer = await get(client, release_id, tars.token(release_id))
    assert answer.status_code == 413
    assert "larger than 1 MiB" in answer.json()["error"]


async def test_a_tar_left_halfway_leaves_no_process_and_no_scratch_directory(
    driver: LocalDriver, source: Path
) -> None:
    """A pod that hangs up mid-download: the response is closed, and so is the tar."""
    (source / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    release_id = await built(driver, APP, source)
    tar = await driver.workspace_tar(release_id, 16 * 1024 * 1024)
    assert tar is not None
    chunks = tar.chunks()
    assert len(await anext(chunks)) > 0
    # the tar goes on filling the pipe until the stream's reader pauses (its buffer full):
    # closed then, the close must not wait for an end of the pipe that reader never reads
    await until(lambda: tar.process.stdout is not None and tar.process.stdout._paused)  # type: ignore[attr-defined]
    async with asyncio.timeout(60):  # a bound, not a speed: before, it waited forever
        await tar.aclose()
    await chunks.aclose()
    assert tar.process.returncode is not None
    directory = driver._existing(release_id).directory  # type: ignore[union-attr]
    assert not list(directory.glob("export.*"))


async def test_no_token_a_garbled_one_or_another_releases_get_one_answer_that_names_nothing(
    driver: LocalDriver, tars: WorkspaceTars, client: httpx.AsyncClient, source: Path
) -> None:
    mine = await built(driver, APP, source)
    other = await built(driver, OTHER, source)  # exists, built: its token opens only it
    token = tars.token(mine)
    tries: list[tuple[str, str | None]] = [
        (mine, None),
        (mine, ""),
        (mine, tars.token(other)),
        (other, token),
        (mine, token[:-1]),
        (mine, token + "0"),
        (mine, token.upper()),
        (mine, "x" * 100_000),
        (mine, "é" * 64),
        (f"{APP}-2", token),  # a release of the same app that was never made
        (f"{2**63}-1", token),
        ("9" * 10_000, token),
        ("0-0", token),
        (f"{APP}-1.", token),
        ("41-1%00", token),
    ]
    answers = set()
    for release_id, presented in tries:
        answer = await get(client, release_id, presented)
        answers.add((answer.status_code, answer.text, answer.headers.get("www-authenticate")))
    assert answers == {
        (401, '{"error":"this token opens no workspace here"}', 'Bearer realm="workspace"')
    }
    for scheme in ("Basic", "bearer", "Token"):
        answer = await client.get(
            f"/internal/releases/{mine}/workspace.tar",
            headers={"authorization": f"{scheme} {token}"},
        )
        assert answer.status_code == (200 if scheme == "bearer" else 401)


async def test_traversal_in_the_path_reaches_no_route_and_the_right_token_of_a_release_never_built_is_404(
    tars: WorkspaceTars, client: httpx.AsyncClient
) -> None:
    for path in (
        "/internal/releases/../../etc/passwd/workspace.tar",
        "/internal/releases/41-1/../workspace.tar",
        "/internal/releases/%2e%2e%2f%2e%2e/workspace.tar",
        "/internal/releases//workspace.tar",
    ):
        answer = await client.get(path, headers={"authorization": f"Bearer {tars.token('41-1')}"})
        assert answer.status_code == 404, path
    missing = f"{2**63}-{2**62}"
    answer = await get(client, missing, tars.token(missing))
    assert (answer.status_code, answer.json()) == (
        404,
        {"error": "no built workspace for this release"},
    )


def test_a_token_is_the_releases_own_and_needs_the_servers_key(tmp_path: Path) -> None:
    async def nothing(release_id: str, max_bytes: int) -> None:
        return None

    one = WorkspaceTars(Sealer.from_settings("key one", tmp_path).mac, nothing)
    two = WorkspaceTars(Sealer.from_settings("key two", tmp_path).mac, nothing)
    assert one.token("1-1") != one.token("1-2") != one.token("11-1")
    assert one.token("1-1") != two.token("1-1")
    assert one.authentic("1-1", one.token("1-1"))
    assert not one.authentic("1-1", two.token("1-1"))
    for bad in ("", "1", "1-", "-1", "a-1", "1-1 ", "1-1/..", "1" * 20 + "-1"):
        with pytest.raises(ValueError, match="is not a release id"):
            one.token(bad)
        assert not one.authentic(bad, one.token("1-1"))


# -- the tar itself, without a sandbox ----------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "dir" / "deep").mkdir(parents=True)
    (root / "dir" / "deep" / "file").write_bytes(b"x" * 1000)
    (root / "setuid").write_text("s")
    (root / "setuid").chmod(0o4755 | stat.S_ISGID)
    os.link(root / "setuid", root / "hardlink")
    os.mkfifo(root / "fifo")
    os.symlink("/etc", root / "etc-link")
    os.symlink("dir", root / "dir-link")
    (root / os.fsdecode(b"caf\xe9")).write_text("latin-1 name")
    return root


def test_the_tar_is_exactly_the_size_announced_and_carries_no_special_file(tree: Path) -> None:
    found = tarball.scan(str(tree), 10 * 1024 * 1024, 100)
    out = io.BytesIO()
    tarball.write(found, out)
    assert len(out.getvalue()) == found.size
    assert found.skipped == 1  # the FIFO
    with tarfile.open(
        fileobj=io.BytesIO(out.getvalue()), mode="r:", errors="surrogateescape"
    ) as archive:
        got = {member.name: member for member in archive.getmembers()}
    assert set(got) == {
        "dir",
        "dir/deep",
        "dir/deep/file",
        "setuid",
        "hardlink",
        "etc-link",
        "dir-link",
        os.fsdecode(b"caf\xe9"),
    }
    assert got["setuid"].mode == 0o755
    assert got["hardlink"].isfile()
    assert got["etc-link"].issym()
    assert got["etc-link"].linkname == "/etc"
    assert got["dir-link"].issym()  # not descended: nothing below it in the tar
    assert not any(name.startswith(("dir-link/", "etc-link/")) for name in got)


def test_over_the_limits_the_scan_refuses(tree: Path) -> None:
    with pytest.raises(tarball.Refused, match="larger than"):
        tarball.scan(str(tree), 4096, 100)
    with pytest.raises(tarball.Refused, match="more than 3 entries"):
        tarball.scan(str(tree), 10 * 1024 * 1024, 3)


def test_a_file_changed_between_scan_and_write_ends_the_stream(tree: Path) -> None:
    found = tarball.scan(str(tree), 10 * 1024 * 1024, 100)
    (tree / "dir" / "deep" / "file").write_bytes(b"y" * 2000)
    with pytest.raises(tarball.Refused, match="changed while it was read"):
        tarball.write(found, io.BytesIO())
