"""A finished test's installs give their uid ranges back (tests/support/installs.py)."""

from __future__ import annotations

from pathlib import Path

from appdeck.runtime.install import claim
from tests.support.installs import release_installs_under


def test_a_range_nothing_runs_on_is_given_back_and_taken_over_by_the_next_install(
    tmp_path: Path,
) -> None:
    registry, run, cgroups = tmp_path / "registry", tmp_path / "run", tmp_path / "cgroup"
    paths = {"registry": registry, "runtime_root": run, "cgroup_root": cgroups}
    first = claim(tmp_path / "test-a" / "data", **paths)  # type: ignore[arg-type]
    assert release_installs_under(tmp_path / "test-a", registry) == 0  # still running
    first.stage.mkdir(parents=True)  # what its apps would have staged
    first.release()
    assert release_installs_under(tmp_path / "test-a", registry) == 1
    assert not (tmp_path / "test-a" / "data" / "install.json").exists()

    second = claim(tmp_path / "test-b" / "data", **paths)  # type: ignore[arg-type]
    try:
        assert second.install.uid_base == first.install.uid_base
        assert second.install.id != first.install.id
        assert not first.stage.exists()  # the taken-over install's runtime dir went with it
    finally:
        second.release()
