"""Copying a source into a release workspace: what is kept, what is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appdeck.common.errors import InvalidArgument, QuotaExceeded
from appdeck.runtime import CopyLimits, LocalDriver
from appdeck.runtime.workspace import copy_source

from .conftest import make_spec


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    (source / "pkg").mkdir(parents=True)
    (source / "app.py").write_text("print('hi')\n")
    (source / "pkg" / "data.txt").write_text("data\n")
    (source / "run.sh").write_text("#!/bin/sh\necho run\n")
    (source / "run.sh").chmod(0o755)
    return source


def test_regular_files_directories_and_modes_are_copied(tmp_path: Path) -> None:
    source = _source(tmp_path)
    stats = copy_source(source, tmp_path / "copy")
    assert (tmp_path / "copy" / "app.py").read_text() == "print('hi')\n"
    assert (tmp_path / "copy" / "pkg" / "data.txt").read_text() == "data\n"
    assert os.access(tmp_path / "copy" / "run.sh", os.X_OK)
    assert stats.files == 4  # app.py, run.sh, pkg/, pkg/data.txt
    assert stats.bytes == sum(p.stat().st_size for p in source.rglob("*") if p.is_file())


def test_vcs_metadata_caches_and_installed_dependencies_are_not_copied(tmp_path: Path) -> None:
    source = _source(tmp_path)
    for name in (".git", "node_modules", ".venv", "__pycache__"):
        (source / name).mkdir()
        (source / name / "junk").write_text("junk")
    copy_source(source, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["app.py", "pkg", "run.sh"]


def test_a_symlink_inside_the_source_points_into_the_copy(tmp_path: Path) -> None:
    source = _source(tmp_path)
    (source / "link.txt").symlink_to(source / "pkg" / "data.txt")  # absolute, but inside
    (source / "pkglink").symlink_to("pkg")
    copy_source(source, tmp_path / "copy")
    link = tmp_path / "copy" / "link.txt"
    assert link.is_symlink()
    assert link.resolve() == (tmp_path / "copy" / "pkg" / "data.txt").resolve()
    assert (tmp_path / "copy" / "pkglink" / "data.txt").read_text() == "data\n"


@pytest.mark.parametrize("target", ["../../../../etc/passwd", "/etc/passwd", "../../outside"])
def test_a_symlink_escaping_the_source_is_refused(tmp_path: Path, target: str) -> None:
    source = _source(tmp_path)
    (tmp_path / "outside").write_text("secret")
    (source / "pkg" / "escape").symlink_to(target)
    with pytest.raises(InvalidArgument) as info:
        copy_source(source, tmp_path / "copy")
    assert "pkg/escape" in info.value.message
    assert "outside the source" in info.value.message


def test_a_symlinked_directory_escaping_the_source_is_refused(tmp_path: Path) -> None:
    source = _source(tmp_path)
    (source / "etc").symlink_to("/etc", target_is_directory=True)
    with pytest.raises(InvalidArgument, match="outside the source"):
        copy_source(source, tmp_path / "copy")


def test_special_files_are_refused(tmp_path: Path) -> None:
    source = _source(tmp_path)
    os.mkfifo(source / "pipe")
    with pytest.raises(InvalidArgument, match="special file"):
        copy_source(source, tmp_path / "copy")


def test_a_source_over_the_size_caps_is_refused(tmp_path: Path) -> None:
    source = _source(tmp_path)
    (source / "big.bin").write_bytes(b"x" * 5000)
    with pytest.raises(QuotaExceeded, match="larger than"):
        copy_source(source, tmp_path / "copy1", limits=CopyLimits(max_bytes=4096))
    with pytest.raises(QuotaExceeded, match="more than 3 files"):
        copy_source(source, tmp_path / "copy2", limits=CopyLimits(max_files=3))


def test_a_missing_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="does not exist"):
        copy_source(tmp_path / "nope", tmp_path / "copy")


async def test_prepare_refuses_an_escaping_symlink_and_leaves_no_workspace(
    driver: LocalDriver, tmp_path: Path
) -> None:
    source = _source(tmp_path)
    (source / "escape").symlink_to("../../../../../../etc")
    with pytest.raises(InvalidArgument, match="escape"):
        await driver.prepare(make_spec(source))
    releases = driver.runtime_dir / "apps" / "12" / "releases" / "12-1"
    assert not (releases / "src").exists()
    assert not (releases / "src.new").exists()
    build_log = [line.text for line in (await driver.logs("12-1", "build")).lines]
    assert any("outside the source" in text for text in build_log)


@pytest.mark.parametrize("release_id", ["../12-1", "12/1", "..", "", "a" * 101, ".hidden"])
async def test_a_release_id_that_is_not_a_plain_name_is_refused(
    driver: LocalDriver, release_id: str
) -> None:
    with pytest.raises(InvalidArgument, match="release id"):
        await driver.logs(release_id, "runtime")
    with pytest.raises(InvalidArgument, match="release id"):
        await driver.stop(release_id)


async def test_a_source_containing_the_runtime_directory_skips_it(tmp_path: Path) -> None:
    source = _source(tmp_path)
    runtime = LocalDriver(source / ".appdeck-runtime")
    try:
        await runtime.prepare(make_spec(source, run_command=None, runtime="static"))
        workspace = runtime.runtime_dir / "apps" / "12" / "releases" / "12-1" / "src"
        assert (workspace / "app.py").exists()
        assert not (workspace / ".appdeck-runtime").exists()
    finally:
        await runtime.detach()
