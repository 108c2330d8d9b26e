"""A deploy's build steps go without the app's secrets unless its spec says ``ci.secrets``
(issue 19, finding 7); its instances get them (whoever deploys runs code with them: the role
table says so)."""

from __future__ import annotations

import base64

from .conftest import World, fetch

SECRET = "bonjour-secret-greeting"
BUILD = 'printf "build-saw:%s:\\n" "$(printf %s "$GREETING" | base64)"'


async def _build_log(world: World, ci_secrets: bool) -> str:
    alice = await world.caller("alice")
    spec = {
        "source_path": str(world.source),
        "build_command": BUILD,
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "ci": {"secrets": ci_secrets},
    }
    app_id = (await alice.ok("register_app", name="hello", spec=spec))["app_id"]
    await alice.ok(
        "env_vars", app_id=app_id, action="set", values={"GREETING": SECRET}, secret=True
    )
    done = await alice.ok("deploy_app", app_id=app_id, wait_seconds=60)
    assert done["state"] == "live", done
    assert (await fetch(world, "hello")).json()["greeting"] == SECRET  # the instance has it
    logs = await alice.ok("tail_deploy_logs", app_id=app_id, kind="build", lines=1000)
    return "\n".join(line["text"] for line in logs["lines"])


async def test_a_deploys_build_command_sees_no_secret_by_default(deploy_world: World) -> None:
    log = await _build_log(deploy_world, ci_secrets=False)
    assert "build-saw::" in log, log
    assert base64.b64encode(SECRET.encode()).decode() not in log


async def test_a_deploys_build_command_gets_the_secrets_with_ci_secrets(
    deploy_world: World,
) -> None:
    log = await _build_log(deploy_world, ci_secrets=True)
    assert f"build-saw:{base64.b64encode(SECRET.encode()).decode()}:" in log, log
