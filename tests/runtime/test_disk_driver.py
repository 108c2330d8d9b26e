"""The local driver on app disks (issue 19, finding 4): workspaces built on the app's disk,
instances that outlive a server restart keep theirs, an older release's workspace stays for
a rollback, deleting the app removes the disk; where loop images cannot work, accounting
stops an app over its limit and says so."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from appdeck.runtime import LocalDriver
from appdeck.runtime.disks import AppDisks, loop_available, mounts, unmount_under
from appdeck.runtime.sandbox import Sandbox
from tests.support.sandbox import sandbox_or_skip

from .conftest import FAST_RESTARTS, HELLO, build_release, eventually, wait_healthy

UID_BASE = 310_000


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[AppDisks]:
    if loop_available() is not None:
        pytest.skip(f"loop-mounted images: {loop_available()}")
    yield AppDisks(tmp_path / "disks", mode="loop", default_mb=96, appdb=tmp_path / "appdb")
    unmount_under(f"{tmp_path}/")


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return sandbox_or_skip(UID_BASE)


def _driver(runtime_dir: Path, sandbox: Sandbox | None, disks: AppDisks) -> LocalDriver:
    return LocalDriver(
        runtime_dir,
        restart=FAST_RESTARTS,
        leftover_grace_s=1.0,
        sandbox=sandbox,
        disks=disks,
        disk_check_s=3600,
    )


async def _cleanup(driver: LocalDriver) -> None:
    for release_id in await driver.releases():
        with contextlib.suppress(Exception):
            await driver.remove(release_id)
    await driver.detach()


async def test_workspaces_live_on_the_app_disk_survive_a_restart_and_go_with_the_app(
    runtime_dir: Path, sandbox: Sandbox, disks: AppDisks
) -> None:
    first = _driver(runtime_dir, sandbox, disks)
    one = build_release(
        app_id=21, release_id="21-1", run_command="exec python3 app.py", health_path="/healthz"
    )
    two = build_release(
        app_id=21, release_id="21-2", run_command="exec python3 app.py", health_path="/healthz"
    )
    try:
        await first.prepare(one)
        workspace = disks.release_root(21, "21-1") / "src"
        assert (workspace / "app.py").is_file()
        assert not (runtime_dir / "apps" / "21" / "releases" / "21-1" / "src").exists()
        ref = await first.launch(one, 0, 8000)
        await wait_healthy(first, ref, within=20)
        await first.detach()  # the server goes; the instance stays

        second = _driver(runtime_dir, sandbox, disks)  # the next server
        first = second
        assert disks.restore() == 1  # idempotent: the disk was still mounted
        adoption = await second.take_over("21-1", one)
        assert [r.index for r in adoption.adopted] == [0]
        await wait_healthy(second, adoption.adopted[0], within=20)

        await second.prepare(two)  # a new release beside it; the old one stays for a rollback
        assert (disks.release_root(21, "21-2") / "src" / "app.py").is_file()
        assert (workspace / "app.py").is_file()
        await second.remove("21-2")
        assert not disks.release_root(21, "21-2").exists()
        await second.remove("21-1")
        await second.remove_app(21)
        assert str(disks.mount_point(21)) not in mounts()
        assert not disks.image(21).exists()
    finally:
        await _cleanup(first)


async def test_accounting_stops_an_app_over_its_disk_and_its_log_says_so(
    runtime_dir: Path, tmp_path: Path
) -> None:
    disks = AppDisks(tmp_path / "disks", mode="account", default_mb=64)  # 48 MiB of files
    driver = _driver(runtime_dir, None, disks)
    fill = "open('big', 'wb').write(b'x' * (80 << 20)); import time; time.sleep(600)"
    release = build_release(
        app_id=22,
        source_path=HELLO,
        runtime="command",
        run_command=f'python3 -c "{fill}"',
        disk_mb=64,  # a spec always names its disk now (APPDECK_APP_DISK_MB is its default)
    )
    try:
        await driver.prepare(release)
        await driver.launch(release, 0, 8000)
        assert await driver.check_disks() == []  # not yet written: under its limit
        big = driver._existing(release.release_id)
        assert big is not None
        await eventually(lambda: _size(big.workspace / "big") >= 80 << 20, within=30)
        assert await driver.check_disks() == [22]
        assert await driver.handles(release.release_id) == []
        log = (big.directory / "runtime.log").read_text()
        assert "the app's disk is full" in log
        assert "over its 48 MiB" in log
    finally:
        await _cleanup(driver)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


async def test_an_apps_tables_made_before_its_first_deploy_are_on_its_disk(
    runtime_dir: Path, disks: AppDisks
) -> None:
    driver = _driver(runtime_dir, None, disks)
    try:
        await disks.place(23)  # what a table tool does first (AppDatabases.place)
        assert disks.appdb is not None
        assert str(disks.appdb / "23") in mounts()
        (disks.appdb / "23" / "app.db").write_bytes(b"tables")
        await driver.prepare(build_release(app_id=23, release_id="23-1", runtime="static"))
        assert (disks.mount_point(23) / "data" / "app.db").read_bytes() == b"tables"
        await driver.remove("23-1")
        await driver.remove_app(23)
        assert str(disks.appdb / "23") not in mounts()
    finally:
        await _cleanup(driver)
