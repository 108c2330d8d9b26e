"""add_table_and_api_key: a table of the app's database, a key, api_auth required, checked
with and without the key; columns given as name:type are checked as manage_table does."""

from __future__ import annotations

from tests.prompts.conftest import SHARED_ROOT, World, prompt, real_calls, refused, with_shop

pytestmark = SHARED_ROOT


async def test_the_table_and_key_steps_carry_the_given_columns_and_key_name(
    world: World,
) -> None:
    bob, app_id = await with_shop(world)
    text = await prompt(
        bob,
        "add_table_and_api_key",
        app_id=app_id,
        table="todos",
        columns="title:text, done : boolean,due:timestamp",
        key_name="mobile app",
    )
    assert "tables none; api_auth none; nothing is live yet" in text
    made = await real_calls(bob, text)
    assert made[0] == "manage_table"
    assert {"records", "manage_api_key", "set_app_spec", "get_app_url", "test_api"} <= set(made)
    columns = (
        '[{"name": "title", "type": "text"}, {"name": "done", "type": "boolean"}, '
        '{"name": "due", "type": "timestamp"}]'
    )
    assert columns in text
    assert '"name": "mobile app"' in text
    assert '"spec": {"api_auth": "required"}' in text
    assert "DATABASE_URL" in text
    assert "X-API-Key" in text


async def test_an_existing_table_and_required_keys_are_said_not_redone(world: World) -> None:
    alice, app_id = await with_shop(world, "alice")
    todos = {"table": "todos", "columns": [{"name": "title", "type": "text"}]}
    await alice.ok("manage_table", action="create", app_id=int(app_id), **todos)
    await alice.ok("set_app_spec", app_id=int(app_id), spec={"api_auth": "required"})
    text = await prompt(alice, "add_table_and_api_key", app_id=app_id, table="todos")
    assert "tables todos; api_auth required" in text
    assert "The table todos exists" in text
    assert "already requires a key" in text
    made = await real_calls(alice, text)
    assert made[0] == "manage_table"
    assert '"action": "describe"' in text
    assert "set_app_spec" not in made
    assert '"name": "todos client"' in text  # the default key name


async def test_bad_table_columns_and_key_names_are_invalid_params(world: World) -> None:
    bob, app_id = await with_shop(world)
    for arguments, named in [
        ({"app_id": app_id, "table": "Todos"}, "table"),
        ({"app_id": app_id, "table": "a__b"}, "table"),
        ({"app_id": app_id, "table": "todos", "columns": "title"}, "columns"),
        ({"app_id": app_id, "table": "todos", "columns": "title:varchar"}, "columns"),
        ({"app_id": app_id, "table": "todos", "columns": "id:integer"}, "columns"),
        ({"app_id": app_id, "table": "todos", "columns": "a:text,a:text"}, "columns"),
        ({"app_id": app_id, "table": "todos", "key_name": "k\x00"}, "key_name"),
        ({"app_id": app_id, "table": "todos", "key_name": "k" * 101}, "key_name"),
    ]:
        error = await refused(bob, "add_table_and_api_key", **arguments)
        assert error["data"]["code"] == "invalid_argument", error
        assert named in error["message"], error
    many = ",".join(f"c{i}:text" for i in range(100))
    error = await refused(bob, "add_table_and_api_key", app_id=app_id, table="t", columns=many)
    assert "at most 99" in error["message"]
