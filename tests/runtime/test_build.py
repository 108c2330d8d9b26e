"""prepare: a workspace per release, built with a timeout; the build log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from appdeck.common.errors import Conflict
from appdeck.runtime import BuildFailed, LocalDriver, free_port
from appdeck.runtime.sandbox import Sandbox

from .conftest import HELLO, make_spec, processes_under, wait_healthy


async def test_prepare_copies_the_source_and_runs_the_build_command_in_the_workspace(
    driver: LocalDriver,
) -> None:
    spec = make_spec(
        build_command='echo "building $GREETING in $(pwd)"; echo built > BUILT; echo warn >&2'
    )
    await driver.prepare(spec)
    workspace = driver.runtime_dir / "apps" / "12" / "releases" / "12-1" / "src"
    assert (workspace / "app.py").read_bytes() == (HELLO / "app.py").read_bytes()
    assert (workspace / "BUILT").read_text() == "built\n"
    assert not (HELLO / "BUILT").exists()  # the source is never touched
    lines = (await driver.logs("12-1", "build", cursor=0)).lines
    assert ("stdout", f"building hi in {workspace}") in [(x.stream, x.text) for x in lines]
    assert ("stderr", "warn") in [(x.stream, x.text) for x in lines]
    assert lines[-1].stream == "system"
    assert lines[-1].text == "build succeeded"


async def test_a_build_that_outlives_its_timeout_fails_quickly_and_leaves_no_process(
    driver: LocalDriver,
) -> None:
    spec = make_spec(build_command="echo compiling; (sleep 31 &); sleep 30", build_timeout_s=1.0)
    began = time.monotonic()
    with pytest.raises(BuildFailed) as info:
        await driver.prepare(spec)
    assert time.monotonic() - began < 5.0
    assert info.value.timed_out
    assert info.value.exit_code is None
    assert info.value.code == "failed_precondition"
    assert "did not finish within 1s" in info.value.message
    assert "compiling" in info.value.log_tail
    assert processes_under(driver.runtime_dir) == []


async def test_a_failing_build_reports_its_exit_code_and_the_log_tail(
    driver: LocalDriver,
) -> None:
    spec = make_spec(build_command="for i in $(seq 1 30); do echo line $i; done; exit 3")
    with pytest.raises(BuildFailed) as info:
        await driver.prepare(spec)
    assert info.value.exit_code == 3
    assert not info.value.timed_out
    assert info.value.log_tail[-2:] == [
        "line 30",
        "build failed: build command failed with exit code 3",
    ]
    assert len(info.value.log_tail) == 20
    assert info.value.to_dict()["details"]["exit_code"] == 3


async def test_the_build_sees_the_app_env_but_not_the_server_secrets(
    driver: LocalDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPDECK_SECRET_KEY", "do-not-leak")
    spec = make_spec(
        build_command='echo "key=${APPDECK_SECRET_KEY:-none} greeting=$GREETING home=${HOME:+set}"'
    )
    await driver.prepare(spec)
    texts = [line.text for line in (await driver.logs("12-1", "build", cursor=0)).lines]
    assert "key=none greeting=hi home=set" in texts


async def test_python_runtime_gets_its_own_venv_and_runs_app_py_with_it(
    driver: LocalDriver,
) -> None:
    spec = make_spec(runtime="python", run_command=None)
    await driver.prepare(spec)
    workspace = driver.runtime_dir / "apps" / "12" / "releases" / "12-1" / "src"
    assert (workspace / ".venv" / "bin" / "python").exists()
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    started = [
        line.text
        for line in (await driver.logs("12-1", "runtime", cursor=0)).lines
        if line.stream == "system"
    ]
    assert started[0].endswith(": python app.py")


async def test_preparing_again_is_a_no_op_unless_rebuilt_and_never_rebuilds_under_running_instances(
    driver: LocalDriver, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "app.py").write_text((HELLO / "app.py").read_text())
    (source / "old.txt").write_text("old")
    spec = make_spec(source)
    await driver.prepare(spec)
    (source / "old.txt").unlink()
    (source / "new.txt").write_text("new")
    workspace = driver.runtime_dir / "apps" / "12" / "releases" / "12-1" / "src"
    await driver.prepare(spec)  # built from this spec already: nothing to do
    assert sorted(p.name for p in workspace.iterdir()) == ["app.py", "old.txt"]
    await driver.prepare(spec, rebuild=True)
    assert sorted(p.name for p in workspace.iterdir()) == ["app.py", "new.txt"]
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    await driver.prepare(spec)  # a reconciler may call it while instances run
    with pytest.raises(Conflict):
        await driver.prepare(spec, rebuild=True)
    with pytest.raises(Conflict):
        await driver.prepare(make_spec(source, build_command="true"))


async def test_python_requirements_are_installed_with_pip_in_the_release_venv(
    driver: LocalDriver, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "app.py").write_text((HELLO / "app.py").read_text())
    (source / "requirements.txt").write_text("this is not a requirement !!\n")
    with pytest.raises(BuildFailed) as info:
        await driver.prepare(make_spec(source, runtime="python", run_command=None))
    assert info.value.step == "pip install"
    assert info.value.exit_code not in (0, None)
    workspace = driver.runtime_dir / "apps" / "12" / "releases" / "12-1" / "src"
    assert (workspace / ".venv" / "bin" / "pip").exists()
    system = [
        line.text
        for line in (await driver.logs("12-1", "build", cursor=0, limit=1000)).lines
        if line.stream == "system"
    ]
    pip_step = next(text for text in system if text.startswith("pip install: "))
    assert pip_step.startswith("pip install: ./.venv/bin/python -m pip install")
    assert str(driver.runtime_dir) not in " ".join(system)  # the log is the tenant's


async def test_an_app_id_past_its_installs_uid_range_fails_its_build_plainly(
    runtime_dir: Path,
) -> None:
    driver = LocalDriver(runtime_dir, sandbox=Sandbox(uid_base=1_879_048_192, uid_count=12))
    try:
        with pytest.raises(BuildFailed, match="app 12 has no sandbox uid") as failed:
            await driver.prepare(make_spec())  # app 12: the range holds apps 0-11
        assert failed.value.release_id == "12-1"
        assert not (runtime_dir / "apps" / "12" / "releases" / "12-1" / "src").exists()
    finally:
        await driver.detach()
