"""env_vars: masked, encrypted at rest, admin-only values, .env import, restart marker."""

import sqlalchemy as sa

from appdeck.storage.schema import app_env

from .conftest import SHARED_ROOT, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests


async def test_values_are_set_masked_revealed_and_encrypted(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    await bob.ok("env_vars", app_id=app_id, action="set", name="GREETING", value="hello")
    await bob.ok(
        "env_vars", app_id=app_id, action="set", name="API_KEY", value="s3cr3t-value", secret=True
    )
    listed = await bob.ok("env_vars", app_id=app_id, action="list")
    assert [(v["name"], v["secret"]) for v in listed["vars"]] == [
        ("API_KEY", True),
        ("GREETING", False),
    ]
    assert "s3cr3t" not in str(listed)
    masked = await bob.ok("env_vars", app_id=app_id, action="get", name="API_KEY")
    assert masked["value"] == "********"
    shown = await bob.ok("env_vars", app_id=app_id, action="get", name="API_KEY", reveal=True)
    assert shown["value"] == "s3cr3t-value"
    async with world.services.storage.engine.connect() as conn:
        stored = [r.value for r in (await conn.execute(sa.select(app_env))).all()]
    assert all("s3cr3t" not in v and "hello" not in v for v in stored)
    # nothing runs yet: an env change before the first deploy needs no restart
    assert (await bob.ok("manage_app", app_id=app_id, action="get"))["needs_restart"] is False


async def test_only_admins_read_values(world: World) -> None:
    bob = await world.caller("bob")
    carol = await world.caller("carol")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="developer")
    await carol.ok("env_vars", app_id=app_id, action="set", name="A", value="1")
    assert await carol.error("env_vars", app_id=app_id, action="get", name="A") == "forbidden"
    assert [
        v["name"] for v in (await carol.ok("env_vars", app_id=app_id, action="list"))["vars"]
    ] == ["A"]


async def test_a_dotenv_text_is_imported_and_bad_input_changes_nothing(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    text = "# comment\nexport A=1\nB=\"two words\"\nC='x#y'\nD=plain # trailing\n"
    done = await bob.ok("env_vars", app_id=app_id, action="import", dotenv=text)
    assert done["set"] == ["A", "B", "C", "D"]
    assert (await bob.ok("env_vars", app_id=app_id, action="get", name="B"))["value"] == "two words"
    assert (await bob.ok("env_vars", app_id=app_id, action="get", name="D"))["value"] == "plain"
    assert (
        await bob.error("env_vars", app_id=app_id, action="import", dotenv="NOT A LINE")
        == "invalid_argument"
    )
    huge = "X=" + "y" * 70_000
    huge_result = await bob.tool("env_vars", app_id=app_id, action="import", dotenv=huge)
    assert huge_result["isError"] is True
    assert (
        await bob.error("env_vars", app_id=app_id, action="set", name="PORT", value="1")
        == "invalid_argument"
    )
    assert (
        await bob.error("env_vars", app_id=app_id, action="set", name="1BAD", value="1")
        == "invalid_argument"
    )
    names = [v["name"] for v in (await bob.ok("env_vars", app_id=app_id, action="list"))["vars"]]
    assert names == ["A", "B", "C", "D"]


async def test_a_read_only_token_lists_names_but_cannot_write(world: World) -> None:
    bob = await world.caller("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    reader = await world.caller("bob", scope="apps:read")
    assert (await reader.ok("env_vars", app_id=app_id, action="list"))["vars"] == []
    r = await reader.client.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "env_vars",
                "arguments": {"app_id": app_id, "action": "set", "name": "A", "value": "1"},
            },
        },
        headers={
            "authorization": f"Bearer {reader.token}",
            "mcp-session-id": reader.session,
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        },
    )
    assert r.status_code == 403
    assert r.json()["error"]["data"] == {"scope": "apps:write"}
