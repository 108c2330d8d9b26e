"""Install ids and the host's registry of uid ranges (a registry and runtime root in the
test's tmp dir; the locks are real ``flock``s, which conflict between two opens of one file
even in one process)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from appdeck.runtime import install as install_module
from appdeck.runtime.install import (
    FIRST_BASE,
    UID_COUNT,
    InstallConflict,
    InstallLock,
    claim,
    identify,
)
from appdeck.runtime.sandbox import SandboxUnavailable


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    """(registry, runtime root) of a pretend host."""
    return tmp_path / "registry", tmp_path / "run"


@pytest.fixture
def holds() -> Iterator[list[InstallLock]]:
    """Claims a test made: released at teardown."""
    held: list[InstallLock] = []
    yield held
    for lock in held:
        lock.release()


def _claim(
    data_dir: Path, host: tuple[Path, Path], holds: list[InstallLock], **settings: object
) -> InstallLock:
    registry, runtime_root = host
    cgroup_root = registry.parent / "cgroup"
    lock = claim(
        data_dir,
        registry=registry,
        runtime_root=runtime_root,
        cgroup_root=cgroup_root,
        **settings,  # type: ignore[arg-type]
    )
    holds.append(lock)
    return lock


def test_a_new_data_dir_gets_an_id_and_a_range_of_its_own_recorded_in_it(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    lock = _claim(tmp_path / "a", host, holds)
    install = lock.install
    assert install.uid_base is not None
    assert install.uid_base >= FIRST_BASE
    assert install.uid_base % UID_COUNT == 0
    assert install.cgroup == f"appdeck/{install.id}"
    assert lock.stage == host[1] / install.id
    recorded = json.loads((tmp_path / "a" / "install.json").read_text())
    assert recorded["id"] == install.id
    assert recorded["uid_base"] == install.uid_base


def test_two_data_dirs_get_two_ids_two_ranges_two_cgroups_two_stages(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    a = _claim(tmp_path / "a", host, holds)
    b = _claim(tmp_path / "b", host, holds)
    assert a.install.id != b.install.id
    assert set(a.install.uids).isdisjoint(b.install.uids)
    assert a.install.cgroup != b.install.cgroup
    assert a.stage != b.stage


def test_replicas_on_one_data_dir_share_the_install_and_its_range(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    first = _claim(tmp_path / "a", host, holds)
    second = _claim(tmp_path / "a", host, holds)  # a second replica while the first runs
    assert second.install == first.install
    assert second.stage == first.stage


def test_a_restart_keeps_the_range(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    first = _claim(tmp_path / "a", host, holds)
    first.release()
    _claim(tmp_path / "b", host, holds)  # another install starts meanwhile
    again = _claim(tmp_path / "a", host, holds)
    assert again.install == first.install


def test_a_copy_of_a_running_installs_data_dir_is_refused_naming_the_original(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    _claim(tmp_path / "a", host, holds)
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    with pytest.raises(InstallConflict) as refused:
        _claim(tmp_path / "copy", host, holds)
    message = str(refused.value)
    assert "\n" not in message
    assert f"data dir {(tmp_path / 'a').resolve()};" in message
    assert "running" in message


def test_a_copy_is_refused_while_the_stopped_original_still_holds_the_install(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    original = _claim(tmp_path / "a", host, holds)
    original.release()  # stopped: its apps may still run on those uids
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    with pytest.raises(InstallConflict, match="stopped"):
        _claim(tmp_path / "copy", host, holds)
    shutil.rmtree(tmp_path / "a")  # moved away for good: the copy is the install now
    moved = _claim(tmp_path / "copy", host, holds)
    assert moved.install.id == original.install.id
    assert moved.install.uid_base == original.install.uid_base


def test_an_explicit_uid_base_on_another_installs_range_is_refused(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    a = _claim(tmp_path / "a", host, holds)
    assert a.install.uid_base is not None
    with pytest.raises(InstallConflict, match=str((tmp_path / "a").resolve())):
        _claim(tmp_path / "b", host, holds, uid_base=a.install.uid_base + 1000)


def test_explicit_settings_win_and_the_uid_base_is_recorded(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    lock = _claim(tmp_path / "a", host, holds, uid_base=300_000, cgroup="appdeck-staging")
    assert lock.install.uid_base == 300_000
    assert lock.install.cgroup == "appdeck-staging"
    lock.release()
    again = _claim(tmp_path / "a", host, holds)  # the setting removed: the uids stay
    assert again.install.uid_base == 300_000
    assert again.install.cgroup == f"appdeck/{again.install.id}"


def test_an_existing_data_dir_with_apps_keeps_its_uids_and_cgroup(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    (tmp_path / "old" / "runtime" / "apps").mkdir(parents=True)
    lock = _claim(tmp_path / "old", host, holds)
    assert lock.install.uid_base == 200_000
    assert lock.install.cgroup == "appdeck"
    assert identify(tmp_path / "old") == lock.install  # recorded for good


def test_two_old_data_dirs_on_the_old_default_range_cannot_both_run(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    for name in ("old1", "old2"):
        (tmp_path / name / "appdb").mkdir(parents=True)
    _claim(tmp_path / "old1", host, holds)
    with pytest.raises(InstallConflict, match="old1"):
        _claim(tmp_path / "old2", host, holds)


def test_the_range_of_a_deleted_data_dir_is_taken_over_and_its_host_leftovers_removed(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    gone = _claim(tmp_path / "gone", host, holds)
    (gone.stage / "app").mkdir(parents=True)
    empty = tmp_path / "cgroup" / "memory" / gone.install.cgroup
    empty.mkdir(parents=True)
    busy = tmp_path / "cgroup" / "pids" / gone.install.cgroup
    (busy / "1-1.0").mkdir(parents=True)  # an instance of it still runs
    gone.release()
    shutil.rmtree(tmp_path / "gone")
    new = _claim(tmp_path / "new", host, holds)
    assert new.install.uid_base == gone.install.uid_base
    assert not gone.stage.exists()
    assert not empty.exists()
    assert busy.exists()


def test_a_replica_that_lost_the_race_to_make_the_id_takes_the_winners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    winner = {"id": "0123456789ab", "uid_base": None}
    reads = iter([None])  # this replica looked before the other one wrote install.json

    def racing_read(path: Path) -> dict[str, object] | None:
        if path.name == "install.json" and next(reads, "done") is None:
            path.write_text(json.dumps(winner))  # the other replica, meanwhile
            return None
        return json.loads(path.read_text()) if path.exists() else None

    monkeypatch.setattr(install_module, "_read_record", racing_read)
    assert identify(tmp_path / "a").id == "0123456789ab"
    assert json.loads((tmp_path / "a" / "install.json").read_text()) == winner


def test_an_install_json_without_an_id_asks_for_a_new_identity(
    tmp_path: Path, host: tuple[Path, Path], holds: list[InstallLock]
) -> None:
    first = _claim(tmp_path / "a", host, holds)
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    (tmp_path / "copy" / "install.json").write_text("{}")
    copy = _claim(tmp_path / "copy", host, holds)
    assert copy.install.id != first.install.id
    assert set(copy.install.uids).isdisjoint(first.install.uids)


def test_an_unreadable_install_json_stops_the_start_and_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "install.json").write_text("{not json")
    with pytest.raises(SandboxUnavailable, match="is not a JSON object"):
        identify(tmp_path / "a")
    assert (tmp_path / "a" / "install.json").read_text() == "{not json"
