"""Secrets and roles (issue 19, finding 7), through the tools: a developer's CI test command
that prints a secret transformed (``base64``, past the masking) sees no secret unless the
app's spec says ``ci.secrets``, which only an admin or owner may turn on."""

from __future__ import annotations

import base64

from tests.platform.repos.gitrepo import bare_repo
from tests.tools.conftest import SHARED_ROOT, Caller, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests

SECRET = "s3cr3t-t0ken-value"
PRINTS_IT = 'printf "seen:%s:" "$(printf %s "$API_TOKEN" | base64)"; printf "plain:%s" "${#PLAIN}"'


async def _app(world: World, alice: Caller) -> int:
    """alice's python app, connected to a repository, with a secret and a plain env var;
    bob is a developer on it and sets its CI test command."""
    repo = bare_repo(world.source.parent, "hello.git")  # inside acme's source root
    repo.commit({"app.py": "print('hi')\n"}, "first version")
    spec = {"run_command": "python3 app.py"}
    app_id = int((await alice.ok("register_app", name="hello", spec=spec))["app_id"])
    await alice.ok("connect_repo", action="connect", app_id=app_id, url=str(repo.bare))
    await alice.ok(
        "env_vars", app_id=app_id, action="set", values={"API_TOKEN": SECRET}, secret=True
    )
    await alice.ok("env_vars", app_id=app_id, action="set", values={"PLAIN": "visible"})
    await alice.ok("manage_app", action="grant", app_id=app_id, user="bob", role="developer")
    return app_id


async def _run_log(bob: Caller, app_id: int, number: int) -> str:
    ran = await bob.ok("manage_ci", action="trigger", app_id=app_id, wait_seconds=60)
    assert ran["run"]["number"] == number, ran
    assert ran["run"]["state"] == "passed", ran
    logs = await bob.ok("manage_ci", action="logs", app_id=app_id, number=number)
    return str(logs["log"])


async def test_a_developers_ci_command_printing_a_secret_in_base64_sees_no_secret(
    world: World,
) -> None:
    alice, bob = await world.caller("alice"), await world.caller("bob")
    app_id = await _app(world, alice)
    await bob.ok("manage_ci", action="configure", app_id=app_id, test_command=PRINTS_IT)
    log = await _run_log(bob, app_id, 1)
    assert "plain:7" in log, log  # the run ran, with the app's non-secret env (masked: its length)
    assert "seen::" in log, log  # an empty API_TOKEN
    assert base64.b64encode(SECRET.encode()).decode() not in log


async def test_ci_secrets_set_by_an_admin_gives_the_run_the_secrets(world: World) -> None:
    alice, bob = await world.caller("alice"), await world.caller("bob")
    app_id = await _app(world, alice)
    await alice.ok("set_app_spec", app_id=app_id, spec={"ci": {"secrets": True}})
    await bob.ok("manage_ci", action="configure", app_id=app_id, test_command=PRINTS_IT)
    log = await _run_log(bob, app_id, 1)
    assert f"seen:{base64.b64encode(SECRET.encode()).decode()}:" in log, log


async def test_a_developer_cannot_turn_ci_secrets_on(world: World) -> None:
    alice, bob = await world.caller("alice"), await world.caller("bob")
    app_id = await _app(world, alice)
    for spec in ({"ci": {"secrets": True}}, {"ci": {"secrets": True}, "instances": 2}):
        refused = await bob.tool("set_app_spec", app_id=app_id, spec=spec)
        assert refused.get("isError") is True, refused
        error = refused["structuredContent"]["error"]
        assert error["code"] == "forbidden", error
        assert "ci.secrets" in error["message"], error
        dry = await bob.tool("set_app_spec", app_id=app_id, spec=spec, dry_run=True)
        assert dry["structuredContent"]["error"]["code"] == "forbidden", dry
    spec = (await bob.ok("manage_app", app_id=app_id, action="get"))["spec"]
    assert (spec["ci"], spec["instances"]) == ({"secrets": False}, 1)
    await alice.ok("set_app_spec", app_id=app_id, spec={"ci": {"secrets": True}})
    # once on, a developer's other changes go through (and may turn it off)
    await bob.ok("set_app_spec", app_id=app_id, spec={"instances": 2})
    await bob.ok("set_app_spec", app_id=app_id, spec={"ci": {"secrets": False}})
