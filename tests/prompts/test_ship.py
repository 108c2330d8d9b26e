"""ship_directory: inline files (or a git push) to a live URL, filled from the platform."""

from __future__ import annotations

from tests.prompts.conftest import SHARED_ROOT, World, prompt, real_calls, refused, with_shop

pytestmark = SHARED_ROOT


async def test_the_three_workflow_prompts_are_listed_with_their_arguments(world: World) -> None:
    bob = await world.caller("bob")
    listed = {p["name"]: p for p in (await bob.rpc("prompts/list"))["result"]["prompts"]}
    assert {"ship_directory", "set_up_ci_and_auto_deploy", "add_table_and_api_key"} <= set(listed)
    ship = {a["name"]: a["required"] for a in listed["ship_directory"]["arguments"]}
    assert ship == {"name": True, "directory": False, "method": False, "strategy": False}


async def test_shipping_a_new_app_sends_inline_files_as_a_task_then_checks_the_url(
    world: World,
) -> None:
    bob = await world.caller("bob")
    text = await prompt(bob, "ship_directory", name="shop", directory="~/code/shop")
    assert "~/code/shop" in text
    assert "shop does not exist yet" in text
    assert "1000 files and 3 MiB" in text  # this server's inline caps
    assert "as a task" in text
    made = await real_calls(bob, text)
    assert made[0] == "import_and_deploy"
    assert {"preflight_check", "deploy_app", "get_app_url"} <= set(made)


async def test_shipping_an_existing_app_sends_only_changed_files_to_its_id(world: World) -> None:
    bob, app_id = await with_shop(world)
    text = await prompt(bob, "ship_directory", name="shop", strategy="canary")
    assert f"app_id {app_id}" in text
    assert "nothing is live" in text
    assert "<app_id>" not in text
    made = await real_calls(bob, text)
    assert made[0] == "deploy_app"
    assert f'"app_id": {app_id}, "files"' in text
    assert '"strategy": "canary"' in text


async def test_shipping_by_git_names_the_apps_push_url_and_its_hosted_remote(
    world: World,
) -> None:
    bob = await world.caller("bob")
    text = await prompt(bob, "ship_directory", name="shop", method="git")
    assert "/git/acme/shop.git HEAD:main" in text
    assert "repos:write" in text
    made = await real_calls(bob, text)
    assert made[:3] == ["register_app", "connect_repo", "import_and_deploy"]
    assert '"url": "hosted", "auto_deploy": true' in text


async def test_bad_ship_arguments_are_invalid_params_naming_the_argument(world: World) -> None:
    bob = await world.caller("bob")
    for arguments, named in [
        ({"name": "Shop!"}, "name"),
        ({"name": "shop", "directory": "a\x00b"}, "directory"),
        ({"name": "shop", "directory": "a\nb"}, "directory"),
        ({"name": "shop", "directory": "x" * 1025}, "directory"),
        ({"name": "shop", "method": "ftp"}, "method"),
        ({"name": "shop", "strategy": "yolo"}, "strategy"),
    ]:
        error = await refused(bob, "ship_directory", **arguments)
        assert error["data"]["code"] == "invalid_argument", error
        assert named in error["message"], error
    missing = await refused(bob, "ship_directory")
    assert "name" in missing["message"]
