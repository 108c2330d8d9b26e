"""What an agent reads (issue 20, item 15): tool descriptions without repeated generated
words, argument errors in words (not a regex) that say what a tool takes, and an ISO 8601
twin beside every Unix timestamp."""

from __future__ import annotations

import re
from typing import Any

from appdeck.tools.timestamps import add_iso, iso

from .conftest import World

_REPEATS = re.compile(r"Needs [^.]*\. Needs|\(([^)]*)\) \(\1\)|\b(\w+) \2\b")


def _texts(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k == "description" and isinstance(v, str)]
        return found + [t for k, v in node.items() if k != "description" for t in _texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in _texts(v)]
    return []


async def test_no_tool_description_repeats_generated_words(world: World) -> None:
    bob = await world.caller("bob")
    listed = (await bob.rpc("tools/list"))["result"]["tools"]
    texts = [t for tool in listed for t in [tool["description"], *_texts(tool["inputSchema"])]]
    repeated = [m.group(0) for t in texts if (m := _REPEATS.search(t))]
    assert repeated == []
    actions = {
        tool["name"]: tool["inputSchema"]["properties"]["action"]["description"]
        for tool in listed
        if "action" in tool["inputSchema"].get("properties", {})
    }
    assert "create: A new table with its columns" in actions["manage_table"]
    assert "Needs table, columns." in actions["manage_table"]


async def test_a_bad_app_name_is_explained_in_words_not_a_regex(world: World) -> None:
    bob = await world.caller("bob")
    result = await bob.tool("register_app", name="Bad Name")
    message = result["structuredContent"]["error"]["message"]
    assert "lower-case letters, digits and dashes, 1 to 40 characters" in message.lower()
    assert "[a-z0-9]" not in message


async def test_an_unknown_argument_is_answered_with_what_the_tool_takes(world: World) -> None:
    bob = await world.caller("bob")
    made = await bob.ok("register_app", name="shop")
    result = await bob.tool("get_api_schema", app_id=made["app_id"], operation_id="getItems")
    error = result["structuredContent"]["error"]
    assert error["code"] == "invalid_argument"
    assert "operation_id is not an argument" in error["message"]
    assert "it takes" in error["message"]
    assert "app_id" in error["message"]


async def test_every_timestamp_has_an_iso_twin_in_the_result_and_its_schema(world: World) -> None:
    bob = await world.caller("bob")
    made = await bob.ok("register_app", name="shop")
    got = await bob.ok("manage_app", app_id=made["app_id"], action="get")
    member = got["members"][0]
    assert member["granted_at_iso"] == iso(member["granted_at"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", member["granted_at_iso"])
    listed = (await bob.rpc("tools/list"))["result"]["tools"]
    schema = next(t for t in listed if t["name"] == "manage_ci")["outputSchema"]
    assert "updated_at_iso" in str(schema)
    assert "finished_at_iso" in str(schema)


def test_iso_twins_follow_nulls_and_skip_what_is_no_timestamp() -> None:
    stamped = add_iso({"runs": [{"finished_at": None, "at": 0, "flat": 1.5, "ok_at": True}]})
    assert stamped == {
        "runs": [
            {
                "finished_at": None,
                "finished_at_iso": None,
                "at": 0,
                "at_iso": "1970-01-01T00:00:00.000Z",
                "flat": 1.5,
                "ok_at": True,
            }
        ]
    }
    assert iso(-1.0) is None
    assert iso(2.0**63) is None
