"""Instance cgroups on v1 and v2 layouts (fake hierarchies in a temporary directory: the
kernel's own are exercised by test_sandbox.py)."""

from __future__ import annotations

from pathlib import Path

from appdeck.runtime.cgroups import Cgroups, Limits, Usage, oom_kills


def test_v2_is_detected_by_its_controllers_file_and_limits_land_in_one_group(
    tmp_path: Path,
) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    (tmp_path / "appdeck").mkdir()
    (tmp_path / "appdeck" / "cgroup.subtree_control").write_text("")
    cgroups = Cgroups.detect(tmp_path)
    assert cgroups is not None
    assert cgroups.version == 2
    group = cgroups.create("7-1.0", Limits(memory_mb=64, cpus=0.5, pids=16))
    directory = tmp_path / "appdeck" / "7-1.0"
    assert group.procs == (directory / "cgroup.procs",)
    assert (directory / "memory.max").read_text() == str(64 * 1024 * 1024)
    assert (directory / "memory.swap.max").read_text() == "0"
    assert (directory / "pids.max").read_text() == "20"  # the shim and the sandbox too
    assert (directory / "cpu.max").read_text() == "50000 100000"


def test_v2_without_the_memory_controller_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu pids\n")
    assert Cgroups.detect(tmp_path) is None


def test_v1_limits_land_in_each_controllers_hierarchy(tmp_path: Path) -> None:
    for controller in ("memory", "pids", "cpu"):
        (tmp_path / controller).mkdir()
    cgroups = Cgroups.detect(tmp_path)
    assert cgroups is not None
    assert cgroups.version == 1
    group = cgroups.create("7-1.0", Limits(memory_mb=128, cpus=2, pids=100))
    assert group.procs == tuple(
        tmp_path / c / "appdeck" / "7-1.0" / "cgroup.procs" for c in ("memory", "pids", "cpu")
    )
    memory = tmp_path / "memory" / "appdeck" / "7-1.0"
    assert (memory / "memory.limit_in_bytes").read_text() == str(128 * 1024 * 1024)
    assert (tmp_path / "pids" / "appdeck" / "7-1.0" / "pids.max").read_text() == "104"
    assert (tmp_path / "cpu" / "appdeck" / "7-1.0" / "cpu.cfs_quota_us").read_text() == "200000"
    assert group.oom_events == memory / "memory.oom_control"


def test_a_host_without_cgroups_gets_none(tmp_path: Path) -> None:
    assert Cgroups.detect(tmp_path) is None


def test_oom_kills_are_read_from_either_versions_events_file(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert oom_kills(events) == 3
    assert oom_kills(tmp_path / "missing") == 0
    assert oom_kills(None) == 0


def test_an_installs_groups_nest_under_its_own_name_on_v2(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for level in ("", "appdeck", "appdeck/0123abcd4567"):
        (tmp_path / level).mkdir(exist_ok=True)
        (tmp_path / level / "cgroup.subtree_control").write_text("")
    cgroups = Cgroups.detect(tmp_path, name="appdeck/0123abcd4567")
    assert cgroups is not None
    for level in ("", "appdeck", "appdeck/0123abcd4567"):  # each level delegates down
        assert (tmp_path / level / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    group = cgroups.create("1-1.0", Limits())
    assert group.procs == (tmp_path / "appdeck" / "0123abcd4567" / "1-1.0" / "cgroup.procs",)


def test_an_installs_groups_nest_under_its_own_name_on_v1(tmp_path: Path) -> None:
    for controller in ("memory", "pids", "cpu"):
        (tmp_path / controller).mkdir()
    cgroups = Cgroups.detect(tmp_path, name="appdeck/0123abcd4567")
    assert cgroups is not None
    group = cgroups.create("1-1.0", Limits())
    assert group.procs == tuple(
        tmp_path / c / "appdeck" / "0123abcd4567" / "1-1.0" / "cgroup.procs"
        for c in ("memory", "pids", "cpu")
    )


def test_v2_usage_is_read_from_memory_current_and_cpu_stat(tmp_path: Path) -> None:
    group = tmp_path / "appdeck" / "7-1.0"
    group.mkdir(parents=True)
    (group / "memory.current").write_text("5242880\n")
    (group / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    usage = Cgroups(2, tmp_path).usage("7-1.0")
    assert (usage.memory_bytes, usage.cpu_seconds) == (5242880, 2.5)
    assert Cgroups(2, tmp_path).usage("gone") == Usage(None, None)


def test_v1_joins_cpuacct_where_it_is_a_hierarchy_of_its_own_and_reads_its_usage(
    tmp_path: Path,
) -> None:
    for controller in ("memory", "pids", "cpu", "cpuacct"):
        (tmp_path / controller).mkdir()
    cgroups = Cgroups.detect(tmp_path)
    assert cgroups is not None
    group = cgroups.create("7-1.0", Limits())
    accounting = tmp_path / "cpuacct" / "appdeck" / "7-1.0"
    assert accounting / "cgroup.procs" in group.procs  # the shim joins it: its CPU is counted
    (tmp_path / "memory" / "appdeck" / "7-1.0" / "memory.usage_in_bytes").write_text("4096\n")
    (accounting / "cpuacct.usage").write_text("1500000000\n")
    assert cgroups.usage("7-1.0") == Usage(4096, 1.5)


def test_v1_reads_cpuacct_in_the_cpu_group_where_both_share_a_hierarchy(tmp_path: Path) -> None:
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu").symlink_to("cpu,cpuacct")
    (tmp_path / "cpuacct").symlink_to("cpu,cpuacct")
    for controller in ("memory", "pids"):
        (tmp_path / controller).mkdir()
    cgroups = Cgroups.detect(tmp_path)
    assert cgroups is not None
    group = cgroups.create("7-1.0", Limits())
    assert len(group.procs) == 3  # memory, pids, cpu(+cpuacct): joined once
    (tmp_path / "cpu" / "appdeck" / "7-1.0" / "cpuacct.usage").write_text("2000000000\n")
    assert cgroups.usage("7-1.0").cpu_seconds == 2.0
    assert cgroups.usage("7-1.0").memory_bytes is None  # no such file in a fake hierarchy
