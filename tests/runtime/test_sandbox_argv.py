"""How a command is wrapped into the sandbox (no processes started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.runtime.cgroups import Cgroups, Limits
from appdeck.runtime.sandbox import NoSandboxUid, Sandbox


def test_each_app_runs_as_a_uid_of_its_own_dropped_before_bubblewrap() -> None:
    argv = Sandbox(uid_base=200_000, cgroups=Cgroups(1)).wrap(
        ["python3", "app.py"], app_id=7, own_network=False, workspace=Path("/w")
    )
    setpriv = argv.index("setpriv")
    assert argv[setpriv + 1 : setpriv + 6] == [
        "--reuid=200007",
        "--regid=200007",
        "--clear-groups",
        "--inh-caps=-all",
        "--no-new-privs",
    ]
    assert argv.index("bwrap") > setpriv
    assert argv[argv.index("--uid") + 1] == "200007"
    assert "--unshare-net" not in argv  # an instance's network is made by the platform
    assert argv[-3:] == ["--", "python3", "app.py"]
    assert argv[argv.index("--remount-ro") + 1] == "/"


def test_builds_and_copies_can_get_a_network_of_bubblewraps() -> None:
    argv = Sandbox(cgroups=Cgroups(1)).wrap(
        ["true"], app_id=1, own_network=True, workspace=Path("/w"), source_fd=9
    )
    assert "--unshare-net" in argv
    assert "/proc/self/fd/9" in argv  # the source is bound from the checked descriptor


def test_without_cgroups_rlimits_limit_memory_and_processes() -> None:
    argv = Sandbox(cgroups=None).wrap(
        ["true"], app_id=1, own_network=False, workspace=Path("/w"), limits=Limits(64, 1, 32)
    )
    at = argv.index("prlimit")
    assert argv[at : at + 5] == [
        "prlimit",
        f"--as={64 * 1024 * 1024}",
        "--nproc=32",
        "--",
        "setpriv",
    ]


def test_the_host_etc_is_not_mounted_whole() -> None:
    argv = Sandbox(cgroups=Cgroups(1)).wrap(
        ["true"], app_id=1, own_network=False, workspace=Path("/w")
    )
    mounted = {argv[i + 1] for i, arg in enumerate(argv) if arg.startswith("--ro-bind")}
    assert "/etc" not in mounted
    assert "/etc/shadow" not in mounted
    assert not any(path.startswith(("/root", "/home", "/var")) for path in mounted)


def test_an_app_id_past_the_uid_range_is_refused() -> None:
    with pytest.raises(ValueError, match="no sandbox uid"):
        Sandbox(uid_base=200_000).uid_for(2**31)


def test_an_app_id_past_its_installs_range_is_refused_clearly() -> None:
    sandbox = Sandbox(uid_base=1_879_048_192, uid_count=65_536)
    assert sandbox.uid_for(65_535) == 1_879_048_192 + 65_535
    with pytest.raises(NoSandboxUid, match="apps 0-65535 a uid each") as refused:
        sandbox.uid_for(65_536)
    assert refused.value.code == "failed_precondition"


def test_the_workspace_is_staged_in_the_installs_own_runtime_dir() -> None:
    stage = Path("/run/appdeck/0123abcd4567")
    argv = Sandbox(cgroups=Cgroups(1), stage=stage).wrap(
        ["true"], app_id=1, own_network=True, workspace=Path("/w"), source_fd=9
    )
    assert argv[argv.index("appdeck-stage") + 4] == str(stage)  # the script's $4
    assert argv[argv.index("/app") - 1] == str(stage / "app")
    assert argv[argv.index("/source") - 1] == str(stage / "source")
    assert not any("/run/appdeck-sandbox" in arg for arg in argv)


def test_tmp_is_a_tmpfs_of_the_apps_disk_share_when_a_size_is_given() -> None:
    sized = Sandbox(cgroups=Cgroups(1)).wrap(
        ["true"], app_id=1, own_network=True, workspace=Path("/w"), tmp_mb=256
    )
    tmpfs = sized.index("--tmpfs")
    assert sized[tmpfs - 2 : tmpfs + 2] == ["--size", str(256 * 1024 * 1024), "--tmpfs", "/tmp"]
    unsized = Sandbox(cgroups=Cgroups(1)).wrap(
        ["true"], app_id=1, own_network=True, workspace=Path("/w")
    )
    assert "--size" not in unsized
