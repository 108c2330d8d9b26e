"""The sandbox, tried as a hostile tenant would: the hostile fixture app probes what it can
reach from inside, and the host checks what it left behind. Real bubblewrap, real cgroups,
loopback only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from appdeck.model.release import Release
from appdeck.runtime import LocalDriver, netns
from appdeck.runtime.model import Handle
from appdeck.runtime.sandbox import Sandbox
from tests.support.sandbox import sandbox_or_skip

from .conftest import (
    FAST_RESTARTS,
    HELLO,
    build_release,
    eventually,
    kill_everything_under,
    wait_healthy,
)

HOSTILE = HELLO.parent / "hostile"
UID_BASE = 300_000


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return sandbox_or_skip(UID_BASE)


@pytest.fixture
async def driver(runtime_dir: Path, sandbox: Sandbox) -> AsyncIterator[LocalDriver]:
    runtime = LocalDriver(runtime_dir, restart=FAST_RESTARTS, leftover_grace_s=1.0, sandbox=sandbox)
    try:
        yield runtime
    finally:
        for release_id in await runtime.releases():
            with contextlib.suppress(Exception):
                await runtime.remove(release_id)
        await runtime.detach()
        kill_everything_under(runtime_dir)


def spec(app_id: int, source: Path = HOSTILE, **overrides: Any) -> Release:
    fields: dict[str, Any] = {
        "app_id": app_id,
        "app_name": f"app{app_id}",
        "release_id": f"{app_id}-1",
        "source_path": source,
        "runtime": "command",
        "run_command": "exec python3 app.py",
        "env": {},
        "health_path": "/healthz",
        "health_timeout_s": 1.0,
        "build_timeout_s": 30.0,
    }
    fields.update(overrides)
    return build_release(**fields)


async def started(driver: LocalDriver, release: Release) -> Handle:
    await driver.prepare(release)
    ref = await driver.launch(release, 0, 8000)
    await wait_healthy(driver, ref)
    return ref


async def probe(driver: LocalDriver, ref: Handle, path: str) -> dict[str, Any]:
    """GET ``path`` from the instance, on its own loopback (as the ingress reaches it)."""
    assert ref.netns is not None
    fd = driver.netns_fd(ref.netns)
    assert fd is not None
    sock = netns.socket_in(fd)
    async with asyncio.timeout(20):
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", ref.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n".encode())
            raw = await reader.read()
        finally:
            writer.close()
    return dict(json.loads(raw.partition(b"\r\n\r\n")[2]))


def host_processes_of(uid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{name}/status").read_text()
            uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
            if int(uids.split()[1]) == uid:
                found.append(int(name))
    return found


async def test_a_hostile_app_runs_as_a_uid_of_its_own_and_sees_only_its_own_processes(
    driver: LocalDriver, sandbox: Sandbox
) -> None:
    ref = await started(driver, spec(31))
    me = await probe(driver, ref, "/whoami")
    assert me["uid"] == me["gid"] == sandbox.uid_for(31) != os.getuid()
    assert max(me["pids"]) < 20  # its own PID namespace: a handful of processes
    assert os.getpid() not in me["pids"] or os.getpid() < 20
    assert (await probe(driver, ref, f"/signal?pid={ref.pid}"))["ok"] is False


async def test_a_hostile_app_reads_nothing_of_the_server(
    driver: LocalDriver, runtime_dir: Path, tmp_path: Path
) -> None:
    keys = tmp_path / "data" / "keys"
    keys.mkdir(parents=True)
    (keys / "signing-jwks.json").write_text('{"private": "key"}')
    (tmp_path / "data" / "appdeck.db").write_text("SQLite format 3")
    ref = await started(driver, spec(32))
    for path in (
        keys / "signing-jwks.json",
        tmp_path / "data" / "appdeck.db",
        runtime_dir / "apps" / "32" / "releases" / "32-1" / "runtime.log",
        runtime_dir / ".env-digest.key",
        Path("/etc/shadow"),
        Path("/root/.bash_history"),
        Path(f"/proc/{os.getpid()}/environ"),
    ):
        outcome = await probe(driver, ref, f"/read?path={path}")
        assert outcome["ok"] is False, (path, outcome)


async def test_a_hostile_app_cannot_find_another_apps_env_in_proc(driver: LocalDriver) -> None:
    secret = "s3cret-of-tenant-a-4711"
    victim = await started(
        driver, spec(33, HELLO, run_command="exec python3 app.py", env={"DB_PASSWORD": secret})
    )
    attacker = await started(driver, spec(34))
    found = await probe(driver, attacker, f"/environs?needle={secret}")
    assert found["found"] == []
    assert victim.pid not in (await probe(driver, attacker, "/whoami"))["pids"]


async def test_a_hostile_app_reaches_no_host_service_and_no_other_app(driver: LocalDriver) -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # a stand-in for the control plane
    port = listener.getsockname()[1]
    try:
        other = await started(driver, spec(35, HELLO, run_command="exec python3 app.py"))
        attacker = await started(driver, spec(36))
        for host, target in (
            ("127.0.0.1", port),
            ("127.0.0.1", 6379),  # Redis
            ("127.0.0.1", 5432),  # PostgreSQL
            ("::1", 6379),
            ("127.0.0.1", other.port + 1),
        ):
            outcome = await probe(driver, attacker, f"/connect?host={host}&port={target}")
            assert outcome["ok"] is False, (host, target, outcome)
    finally:
        listener.close()


async def test_what_a_hostile_app_binds_is_invisible_to_the_host(driver: LocalDriver) -> None:
    ref = await started(driver, spec(37))
    with socket.socket() as probe_socket:  # a port free on the host
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    for host in ("::1", "127.0.0.2"):
        assert (await probe(driver, ref, f"/bind?host={host}&port={port}"))["ok"] is True
    for family, host in ((socket.AF_INET6, "::1"), (socket.AF_INET, "127.0.0.2")):
        with socket.socket(family) as client:
            client.settimeout(2)
            with pytest.raises(ConnectionRefusedError):
                client.connect((host, port))


async def test_a_hostile_app_writes_nowhere_but_its_workspace(
    driver: LocalDriver, tmp_path: Path
) -> None:
    ref = await started(driver, spec(38))
    for path in ("/usr/pwned", "/etc/pwned", str(tmp_path / "pwned"), "/proc/sys/kernel/hostname"):
        assert (await probe(driver, ref, f"/write?path={path}"))["ok"] is False, path
    assert not (tmp_path / "pwned").exists()
    assert (await probe(driver, ref, "/write?path=/app/notes.txt"))["ok"] is True


async def test_nothing_a_hostile_app_forked_outlives_its_removal(
    driver: LocalDriver, sandbox: Sandbox
) -> None:
    ref = await started(driver, spec(39))
    daemon = await probe(driver, ref, "/daemon")
    assert daemon["pid"] > 0
    uid = sandbox.uid_for(39)
    assert len(host_processes_of(uid)) >= 3  # the sandbox, the app, the daemon
    await driver.remove("39-1")
    await eventually(lambda: host_processes_of(uid) == [], within=10)


async def test_a_memory_hog_is_killed_at_its_limit_and_the_log_says_so(
    driver: LocalDriver,
) -> None:
    ref = await started(driver, spec(40, memory_mb=64))
    with contextlib.suppress(Exception):  # the app dies mid-answer
        await probe(driver, ref, "/hog?mb=256")

    async def logged() -> bool:
        page = await driver.logs("40-1", "runtime", cursor=0, grep="out-of-memory")
        return bool(page.lines)

    await eventually(logged, within=20)


async def test_a_fork_bomb_stays_within_its_process_limit(driver: LocalDriver) -> None:
    bystander = await started(driver, spec(41, HELLO, run_command="exec python3 app.py"))
    ref = await started(driver, spec(42, pids=32))
    outcome = await probe(driver, ref, "/forkbomb?limit=5000")
    assert outcome["forked"] < 40
    assert (await driver.check(bystander)).ok


async def test_a_builds_fork_bomb_stays_within_the_builds_process_limit(
    driver: LocalDriver, sandbox: Sandbox, tmp_path: Path
) -> None:
    source = tmp_path / "bomb"
    source.mkdir()
    (source / "bomb.py").write_text(
        "import os, time\n"
        "n = 0\n"
        "while n < 5000:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(20)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print('forked', n, flush=True)\n"
    )
    await driver.prepare(spec(43, source, build_command="python3 bomb.py", pids=16))
    page = await driver.logs("43-1", "build", cursor=0, grep="forked")
    forked = int(page.lines[-1].text.split()[1])
    assert forked < 520  # a build may run 512 processes, not thousands
    if sandbox.cgroups is not None:  # the build's group is gone with the build
        assert not sandbox.cgroups.pids("43-1.build")
        assert not any(path.exists() for path in sandbox.cgroups._dirs("43-1.build"))


def processes_with_env(marker: bytes) -> dict[int, int]:
    """pid -> uid of every host process whose environment holds ``marker``."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, StopIteration):
            if marker in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                status = Path(f"/proc/{name}/status").read_text()
                uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
                found[int(name)] = int(uids.split()[1])
    return found


async def test_no_root_process_ever_holds_the_apps_env(
    driver: LocalDriver, sandbox: Sandbox, tmp_path: Path
) -> None:
    """An app's env in a root process is root code execution (LD_PRELOAD naming a library in
    its source, PATH leading to a `mount` of its own): only the sandboxed app has it."""
    marker = f"APPDECK_ENV_PROBE={os.getpid()}-{tmp_path.name}"
    name, value = marker.split("=", 1)
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "mount").write_text("#!/bin/sh\ntouch /tmp/appdeck-pwned-by-path\nexit 1\n")
    (evil / "mount").chmod(0o755)
    env = {name: value, "PATH": f"{evil}:/usr/bin:/bin", "LD_PRELOAD": str(evil / "nope.so")}
    source = tmp_path / "slowbuild"
    shutil.copytree(HOSTILE, source)
    release = spec(44, source, build_command="sleep 3", env=env)
    build = asyncio.create_task(driver.prepare(release))
    seen: dict[int, int] = {}
    while not build.done():  # bounded by the build's own time (and its 30 s deadline)
        seen |= processes_with_env(marker.encode())
        await asyncio.sleep(0.05)
    await build
    ref = await driver.launch(release, 0, 8000)
    await wait_healthy(driver, ref)
    seen |= processes_with_env(marker.encode())
    uid = sandbox.uid_for(44)
    assert seen, "the app's env reached no process: the probe is broken"
    assert set(seen.values()) == {uid}, seen
    assert not os.path.exists("/tmp/appdeck-pwned-by-path")  # noqa: ASYNC240


async def test_a_sandboxed_python_apps_bare_venv_is_made_by_its_copy_as_the_apps_uid(
    driver: LocalDriver, sandbox: Sandbox
) -> None:
    release = spec(46, HELLO, runtime="python", run_command="exec python app.py")
    ref = await started(driver, release)
    workspace = driver.runtime_dir / "apps" / "46" / "releases" / "46-1" / "src"
    python = workspace / ".venv" / "bin" / "python3"
    assert os.readlink(python) == "/usr/bin/python3"
    assert (workspace / ".venv").lstat().st_uid == sandbox.uid_for(46)
    system = [
        line.text
        for line in (await driver.logs("46-1", "build", cursor=0, limit=100)).lines
        if line.stream == "system"
    ]
    venv_lines = [text for text in system if text.startswith("venv: ")]
    assert venv_lines == ["venv: python3 -m venv --without-pip /app/.venv (with the copy)"]
    assert (await probe(driver, ref, "/healthz"))["ok"] is True
