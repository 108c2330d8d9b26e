"""The app disks (issue 19, finding 4): loop-mounted ext4 images, created, mounted again
idempotently, grown, never shrunk, deleted; the accounting walk where they cannot be."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appdeck.runtime.disks import (
    MIB,
    AppDisks,
    loop_available,
    mounts,
    split,
    unmount_under,
)

pytestmark = pytest.mark.skipif(
    loop_available() is not None, reason=f"loop-mounted images: {loop_available()}"
)


def _mounts_under(root: Path) -> dict[str, str]:
    """This test's mounts (other tests on the machine mount and unmount theirs meanwhile)."""
    return {point: source for point, source in mounts().items() if point.startswith(f"{root}/")}


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[AppDisks]:
    made = AppDisks(tmp_path / "disks", mode="loop", default_mb=128, appdb=tmp_path / "appdb")
    yield made
    unmount_under(f"{tmp_path}/")


def _fill(path: Path, limit_bytes: int) -> tuple[int, int]:
    """Write up to ``limit_bytes`` into ``path``: (bytes written, errno that stopped it)."""
    written, chunk = 0, b"x" * MIB
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while written < limit_bytes:
            try:
                written += os.write(fd, chunk)
            except OSError as exc:
                return written, exc.errno
        return written, 0
    finally:
        os.close(fd)


def test_an_app_disk_is_a_sparse_image_mounted_with_its_workspaces_and_data(
    disks: AppDisks,
) -> None:
    assert disks.ensure(7, 128) is None
    image, point = disks.image(7), disks.mount_point(7)
    assert str(point) in mounts()
    assert mounts()[str(point)].startswith("/dev/loop")
    assert image.stat().st_size == split(128).image_mb * MIB
    assert image.stat().st_blocks * 512 < 32 * MIB  # sparse: the host holds what is written
    assert (image.stat().st_mode & 0o777) == 0o600
    assert (point / "releases").is_dir()
    assert (point / "data").is_dir()
    assert str(disks.appdb / "7") in mounts()  # the SQLite directory is on the disk
    assert disks.release_root(7, "7-1") == point / "releases" / "7-1"


def test_writing_past_an_app_disk_fails_with_enospc_and_the_host_holds_at_most_its_size(
    disks: AppDisks,
) -> None:
    disks.ensure(3, 96)
    image_mb = split(96).image_mb
    before = os.statvfs(disks.root)
    written, error = _fill(disks.mount_point(3) / "data" / "big", 3 * image_mb * MIB)
    assert error == errno.ENOSPC
    assert written <= image_mb * MIB
    after = os.statvfs(disks.root)
    host_used = (before.f_bfree - after.f_bfree) * after.f_frsize
    assert host_used <= image_mb * MIB + 4 * MIB  # the image, plus what the host was doing


def test_ensuring_a_mounted_disk_again_changes_nothing_and_a_lost_mount_comes_back(
    disks: AppDisks,
) -> None:
    disks.ensure(4, 128)
    (disks.mount_point(4) / "releases" / "kept").write_text("yes")
    table = _mounts_under(disks.root.parent)
    disks.ensure(4, 128)
    assert _mounts_under(disks.root.parent) == table  # no second mount stacked on the first
    subprocess.run(["umount", str(disks.appdb / "4")], check=True, timeout=30)
    subprocess.run(["umount", str(disks.mount_point(4))], check=True, timeout=30)  # a reboot
    assert disks.restore() == 1
    assert (disks.mount_point(4) / "releases" / "kept").read_text() == "yes"
    assert str(disks.appdb / "4") in mounts()
    assert disks.restore() == 1
    # the same mount points again (the loop device may be another one: the kernel frees the
    # old one when its last user lets go, and a busy machine may not have yet)
    assert _mounts_under(disks.root.parent).keys() == table.keys()
    assert len(set(_mounts_under(disks.root.parent).values())) == 1


def test_a_larger_disk_mb_grows_the_mounted_disk_and_a_smaller_one_is_not_applied(
    disks: AppDisks,
) -> None:
    disks.ensure(5, 128)
    (disks.mount_point(5) / "data" / "kept").write_text("yes")
    small = os.statvfs(disks.mount_point(5))
    assert disks.ensure(5, 256) is None
    grown = os.statvfs(disks.mount_point(5))
    assert grown.f_blocks * grown.f_frsize > small.f_blocks * small.f_frsize + 80 * MIB
    assert disks.image(5).stat().st_size == split(256).image_mb * MIB
    note = disks.ensure(5, 64)
    assert note is not None
    assert "never shrinks" in note
    assert disks.image(5).stat().st_size == split(256).image_mb * MIB
    assert (disks.mount_point(5) / "data" / "kept").read_text() == "yes"


def test_deleting_an_app_unmounts_its_disk_detaches_the_loop_device_and_removes_the_image(
    disks: AppDisks,
) -> None:
    disks.ensure(6, 96)
    device = mounts()[str(disks.mount_point(6))]
    disks.remove(6)
    table = mounts()
    assert str(disks.mount_point(6)) not in table
    assert str(disks.appdb / "6") not in table
    assert not disks.image(6).exists()
    assert not disks.mount_point(6).exists()

    def still_attached() -> bool:
        listed = subprocess.run(
            ["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        return any(
            line.split()[0] == device and str(disks.root) in line for line in listed.splitlines()
        )

    # the kernel detaches an autoclear loop device when its last user lets go: soon, not at
    # once on a loaded machine (bounded: 100 looks, 0.1 s apart)
    for _ in range(100):
        if not still_attached():
            break
        time.sleep(0.1)
    assert not still_attached()
    disks.remove(6)  # deleting twice is not an error


def test_a_database_directory_made_before_the_disk_is_moved_onto_it_when_unused(
    disks: AppDisks,
) -> None:
    assert disks.appdb is not None
    old = disks.appdb / "8"
    (old / "sub").mkdir(parents=True, mode=0o700)
    (old / "app.db").write_bytes(b"tables")
    (old / "sub" / "notes").write_bytes(b"notes")
    os.symlink("/etc/shadow", old / "planted")  # moved as a link, never followed
    os.mkfifo(old / "fifo")  # left out, never opened
    os.chown(old, 200_008, 200_008)
    disks.ensure(8, 96)  # an instance may use it: it stays where it is
    assert str(old) not in mounts()
    assert (old / "app.db").read_bytes() == b"tables"
    disks.ensure(8, 96, migrate=True)
    assert str(old) in mounts()
    assert (old / "app.db").read_bytes() == b"tables"
    assert (old / "sub" / "notes").read_bytes() == b"notes"
    assert os.readlink(old / "planted") == "/etc/shadow"
    assert not (old / "fifo").exists()
    assert (old / "app.db").stat().st_uid == 200_008
    assert os.lstat(old / "planted").st_uid == 200_008
    assert os.stat(old).st_uid == 200_008
    assert 8 in disks.bound


def test_the_accounting_walk_counts_allocated_bytes_without_following_links(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_bytes(b"y" * (3 * MIB))
    os.symlink("/usr", root / "link")  # not followed: /usr is not the app's
    disks = AppDisks(tmp_path / "disks", mode="account", default_mb=64)
    used = disks.usage([root, tmp_path / "missing"])
    assert 3 * MIB <= used < 4 * MIB
    assert disks.ensure(1, 64) is None
    assert not disks.image(1).exists()


def test_the_split_gives_tmp_a_quarter_within_bounds_and_the_image_the_rest() -> None:
    assert split(1024).tmp_mb == 256
    assert split(1024).image_mb == 768
    for disk_mb in (64, 100, 1024, 8192, 1_048_576):
        parts = split(disk_mb)
        assert parts.image_mb + parts.tmp_mb == disk_mb
        assert 16 <= parts.tmp_mb <= 1024


def test_a_disk_an_instance_holds_grows_online_or_later_and_is_never_mounted_twice(
    disks: AppDisks,
) -> None:
    disks.ensure(9, 96)
    (disks.mount_point(9) / "data" / "kept").write_text("yes")
    holder = subprocess.Popen(  # a running instance: its own mount namespace holds the disk
        ["unshare", "--mount", "--propagation", "private", "sleep", "60"]
    )
    try:
        device = mounts()[str(disks.mount_point(9))]
        note = disks.ensure(9, 192)
        grown = disks.image(9).stat().st_size == split(192).image_mb * MIB
        if note is None:  # the host lets a mounted ext4 grow (CAP_SYS_RESOURCE)
            assert grown
        else:  # grown at a deploy while no instance runs; nothing changed meanwhile
            assert "grows to" in note
            assert not grown
        assert mounts()[str(disks.mount_point(9))] == device  # the same loop device
        assert (disks.mount_point(9) / "data" / "kept").read_text() == "yes"
    finally:
        holder.kill()
        holder.wait(timeout=30)
