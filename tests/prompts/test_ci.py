"""set_up_ci_and_auto_deploy: connect, configure manage_ci with auto_deploy, test the head,
prove the loop with a push; filled from the app's repository and CI."""

from __future__ import annotations

from tests.prompts.conftest import SHARED_ROOT, World, prompt, real_calls, refused, with_shop

pytestmark = SHARED_ROOT


async def test_an_unconnected_app_is_told_to_connect_then_configure_ci_with_auto_deploy(
    world: World,
) -> None:
    bob, app_id = await with_shop(world)
    text = await prompt(
        bob,
        "set_up_ci_and_auto_deploy",
        app_id=app_id,
        test_command='pytest -q -k "not slow"',
        require_green="true",
        strategy="blue_green",
    )
    assert "no repository is connected yet; CI not configured" in text
    assert "/git/acme/shop.git" in text  # the hosted remote's push_url
    made = await real_calls(bob, text)
    assert made[:3] == ["connect_repo", "connect_repo", "manage_ci"]
    assert {"list_deployments", "get_app_url", "set_app_spec"} <= set(made)
    configure = '"test_command": "pytest -q -k \\"not slow\\"", "auto_deploy": true'
    assert configure in text
    assert '"require_green": true, "strategy": "blue_green"' in text
    assert '"action": "trigger"' in text


async def test_without_a_test_command_the_agent_is_asked_to_choose_one(world: World) -> None:
    bob, app_id = await with_shop(world)
    text = await prompt(bob, "set_up_ci_and_auto_deploy", app_id=app_id)
    assert "choose the command that runs its tests" in text
    assert '"require_green": false' in text
    await real_calls(bob, text)


async def test_bad_ci_arguments_and_another_tenants_app_are_invalid_params(world: World) -> None:
    bob, app_id = await with_shop(world)
    for arguments, named in [
        ({"app_id": "x"}, "app_id"),
        ({"app_id": "0"}, "app_id"),
        ({"app_id": app_id, "test_command": "pytest\x00"}, "test_command"),
        ({"app_id": app_id, "test_command": "t" * 4001}, "test_command"),
        ({"app_id": app_id, "require_green": "yes"}, "require_green"),
        ({"app_id": app_id, "strategy": "yolo"}, "strategy"),
    ]:
        error = await refused(bob, "set_up_ci_and_auto_deploy", **arguments)
        assert error["data"]["code"] == "invalid_argument", error
        assert named in error["message"], error
    eve = await world.caller("eve", "globex")
    hidden = await refused(eve, "set_up_ci_and_auto_deploy", app_id=app_id)
    assert hidden["data"]["code"] == "not_found"
