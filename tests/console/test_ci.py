"""The CI tab: the configuration, the runs (paged, refreshed live on ``app.updated``) and a
run's log, masked as ``manage_ci logs`` shows it, bounded and escaped; no secret of the app,
its repository connection or a run anywhere; another tenant's app a 404."""

from __future__ import annotations

from pathlib import Path

from appdeck.storage.ci import CIStore
from tests.console.conftest import ConsoleWorld
from tests.platform.repos.gitrepo import bare_repo
from tests.tools.conftest import Caller

SECRET = "s3cr3t-t0ken-value"
SHA = "a" * 40


def _store(world: ConsoleWorld) -> CIStore:
    return CIStore(world.services.storage.engine)


async def _configured(world: ConsoleWorld) -> tuple[Caller, int]:
    """bob's app with a CI configuration (written as manage_ci configure writes it), carol a
    viewer of it."""
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    values = {
        "branch": "main",
        "test_command": "pytest -q <tests>",
        "auto_deploy": True,
        "strategy": None,
        "require_green": True,
        "timeout_seconds": 600,
    }
    await _store(world).configure(app_id, values, "bob")
    return bob, app_id


async def _run(world: ConsoleWorld, app_id: int, log: str, **values: object) -> int:
    store = _store(world)
    made = await store.create_run(
        app_id,
        commit=SHA,
        message="<b>fix</b> the thing\nsecond line",
        branch="main",
        trigger="push",
        created_by="bob",
        instance_id="test",
        state="queued",
    )
    await store.update(app_id, made.number, log=log, **values)
    return made.number


async def test_owner_and_viewer_see_the_configuration_runs_and_a_log_a_stranger_gets_404(
    world: ConsoleWorld,
) -> None:
    _, app_id = await _configured(world)
    number = await _run(
        world,
        app_id,
        "collecting\n3 passed\n",
        state="passed",
        started_at=1_000.0,
        finished_at=1_075.0,
        exit_code=0,
        status_message="the tests passed; deployed as deployment 4",
        deployment=4,
    )
    for user in ("bob", "carol"):
        browser = world.browser()
        await browser.sign_in(user)
        page = await browser.get(f"/console/apps/{app_id}/ci")
        assert page.status_code == 200
        text = page.text
        assert "pytest -q &lt;tests&gt;" in text
        assert f'href="/console/apps/{app_id}/ci/runs/{number}"' in text
        assert "1 min 15 s" in text
        assert "exit 0" in text
        assert f'href="/console/apps/{app_id}#deployment-4"' in text
        assert "&lt;b&gt;fix&lt;/b&gt; the thing" in text
        assert "second line" not in text
        assert 'data-on="app.updated resync"' in text  # CI emits app.updated on each change
        run = await browser.get(f"/console/apps/{app_id}/ci/runs/{number}")
        assert run.status_code == 200
        assert "3 passed" in run.text
        assert SHA in run.text
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    for path in ("ci", f"ci/runs/{number}", "fragments/ci-runs", f"fragments/ci-runs/{number}"):
        refused = await eve.get(f"/console/apps/{app_id}/{path}")
        assert refused.status_code == 404, path
        assert "pytest" not in refused.text


async def test_a_hostile_log_renders_escaped_bounded_and_visible(world: ConsoleWorld) -> None:
    _, app_id = await _configured(world)
    lines = [f"line {i}" for i in range(3000)]
    lines += ["<script>alert(1)</script>", "\x1b[31mred\x1b[0m \x00 \u202eevil", "日本語 🦄"]
    number = await _run(world, app_id, "\n".join(lines), state="failed", exit_code=1)
    browser = world.browser()
    await browser.sign_in("carol")
    page = await browser.get(f"/console/apps/{app_id}/ci/runs/{number}")
    assert page.status_code == 200
    text = page.text
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "\x1b" not in text
    assert "\\x1b[31mred" in text
    assert "\x00" not in text
    assert "\u202e" not in text
    assert "日本語 🦄" in text
    assert "line 2999" in text
    assert "line 1000\n" not in text
    assert "only its last 1000 lines are shown" in text


async def test_runs_page_and_absurd_numbers_are_a_404_or_a_clamp(world: ConsoleWorld) -> None:
    _, app_id = await _configured(world)
    for _ in range(25):
        await _run(world, app_id, "", state="passed")
    browser = world.browser()
    await browser.sign_in("bob")
    first = await browser.get(f"/console/apps/{app_id}/ci")
    assert "Run #25<" in first.text
    assert "Run #5<" not in first.text
    assert "Older runs" in first.text
    older = await browser.get(f"/console/apps/{app_id}/fragments/ci-runs?offset=20")
    assert "Run #5<" in older.text
    assert "Run #6<" not in older.text
    for number in ["0", "-1", str(2**63), str(2**64), "%E2%91%A0", "1e3", "99999"]:
        page = await browser.get(f"/console/apps/{app_id}/ci/runs/{number}")
        assert page.status_code == 404, number
    for query in ["offset=-5", f"offset={2**63}", "offset=%00", "offset=%E2%91%A0"]:
        page = await browser.get(f"/console/apps/{app_id}/ci?{query}")
        assert page.status_code == 200, query


async def test_an_app_without_ci_says_so(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/ci")
    assert page.status_code == 200
    assert "CI is not configured" in page.text
    assert "No CI run yet" in page.text


async def test_a_real_run_shows_the_masked_log_and_no_page_shows_a_secret(
    world: ConsoleWorld,
) -> None:
    root = Path(world.services.settings.source_roots[0])
    repo = bare_repo(root, "hello.git")
    repo.commit({"app.py": "print('hi')\n"}, "first version")
    alice = await world.agent("alice")
    spec = {"run_command": "python3 app.py"}
    app_id = int((await alice.ok("register_app", name="hello", spec=spec))["app_id"])
    connected = await alice.ok("connect_repo", action="connect", app_id=app_id, url=str(repo.bare))
    webhook = str(connected["webhook_secret"])
    await alice.ok(
        "env_vars", app_id=app_id, action="set", values={"API_TOKEN": SECRET}, secret=True
    )
    await alice.ok("set_app_spec", app_id=app_id, spec={"ci": {"secrets": True}})
    key = str(
        (await alice.ok("manage_api_key", action="create", app_id=app_id, name="k"))["api_key"]
    )
    command = 'echo "token=$API_TOKEN"; echo "<script>x</script>"'
    await alice.ok("manage_ci", action="configure", app_id=app_id, test_command=command)
    ran = await alice.ok("manage_ci", action="trigger", app_id=app_id, wait_seconds=60)
    assert ran["run"]["state"] == "passed", ran
    logs = await alice.ok("manage_ci", action="logs", app_id=app_id, number=1)
    assert "token=" in logs["log"]
    assert SECRET not in logs["log"]
    browser = world.browser()
    await browser.sign_in("alice")
    pages = [
        f"/console/apps/{app_id}",
        f"/console/apps/{app_id}/ci",
        f"/console/apps/{app_id}/ci/runs/1",
        f"/console/apps/{app_id}/fragments/ci-runs",
        f"/console/apps/{app_id}/apis",
        f"/console/apps/{app_id}/tables",
    ]
    for path in pages:
        page = await browser.get(path)
        assert page.status_code == 200, path
        for secret in (SECRET, webhook, key):
            assert secret not in page.text, path
    run = await browser.get(f"/console/apps/{app_id}/ci/runs/1")
    masked = next(line for line in logs["log"].splitlines() if line.startswith("token="))
    assert masked in run.text  # masked exactly as manage_ci logs shows it
    assert "&lt;script&gt;x&lt;/script&gt;" in run.text


async def test_a_running_runs_page_follows_it_an_ended_ones_does_not(world: ConsoleWorld) -> None:
    _, app_id = await _configured(world)
    running = await _run(world, app_id, "", state="running", started_at=1_000.0)
    ended = await _run(world, app_id, "done", state="passed")
    browser = world.browser()
    await browser.sign_in("carol")
    follow = f'data-refresh="/console/apps/{app_id}/fragments/ci-runs/{running}"'
    assert follow in (await browser.get(f"/console/apps/{app_id}/ci/runs/{running}")).text
    page = await browser.get(f"/console/apps/{app_id}/ci/runs/{ended}")
    assert "data-refresh" not in page.text
    fragment = await browser.get(f"/console/apps/{app_id}/fragments/ci-runs/{running}")
    assert fragment.status_code == 200
    assert "<html" not in fragment.text
    assert "No output yet" in fragment.text
