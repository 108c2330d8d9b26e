"""Confirmations for a stateless (MCP 2026-07-28) client: the question comes back as an
``input_required`` result, the answer in a retry carrying the signed ``requestState``."""

from __future__ import annotations

from typing import Any

from tests.support.stateless import StatelessCaller

from .conftest import ALL, SHARED_ROOT, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests

ELICITS = {"elicitation": {}}
YES = {"action": "accept", "content": {"confirm": True}}


async def stateless(world: World, user: str, capabilities: dict[str, Any] | None = None) -> Any:
    token, _ = await world.admin.mint_access_token("acme", user, ALL)
    return StatelessCaller(world.client, token, ELICITS if capabilities is None else capabilities)


async def app_of(world: World, name: str = "shop") -> int:
    bob = await world.caller("bob")
    return int((await bob.ok("register_app", name=name))["app_id"])


async def test_a_delete_asks_then_runs_on_the_retry_with_the_answer_and_the_state(
    world: World,
) -> None:
    app_id = await app_of(world)
    bob = await stateless(world, "bob")
    args = {"app_id": app_id, "action": "delete"}
    first = (await bob.call("manage_app", args))["result"]
    assert first["resultType"] == "input_required"
    [(key, asked)] = first["inputRequests"].items()
    assert asked["method"] == "elicitation/create"
    assert "shop" in asked["params"]["message"]
    assert asked["params"]["requestedSchema"]["required"] == ["confirm"]
    assert (await (await world.caller("bob")).ok("manage_app", app_id=app_id, action="get"))[
        "name"
    ] == "shop"  # nothing happened yet
    done = await bob.call(
        "manage_app", args, inputResponses={key: YES}, requestState=first["requestState"]
    )
    result = done["result"]
    assert result["resultType"] == "complete"
    assert result["structuredContent"]["deleted"] is True


async def test_a_declined_confirmation_changes_nothing(world: World) -> None:
    app_id = await app_of(world)
    bob = await stateless(world, "bob")
    args = {"app_id": app_id, "action": "delete"}
    first = (await bob.call("manage_app", args))["result"]
    [key] = first["inputRequests"]
    no = {"action": "decline"}
    done = await bob.call(
        "manage_app", args, inputResponses={key: no}, requestState=first["requestState"]
    )
    assert done["result"]["isError"] is True
    assert done["result"]["structuredContent"]["error"]["code"] == "failed_precondition"
    assert (await (await world.caller("bob")).ok("manage_app", app_id=app_id, action="get"))[
        "name"
    ] == "shop"


async def test_a_state_is_refused_for_another_caller_and_for_other_arguments(world: World) -> None:
    app_id = await app_of(world)
    other = await app_of(world, "other")
    bob = await stateless(world, "bob")
    alice = await stateless(world, "alice")  # the tenant admin: she may delete it herself
    args = {"app_id": app_id, "action": "delete"}
    first = (await bob.call("manage_app", args))["result"]
    [key] = first["inputRequests"]
    state = first["requestState"]
    stolen = await alice.call("manage_app", args, inputResponses={key: YES}, requestState=state)
    assert stolen["error"]["code"] == -32602
    moved = await bob.call(
        "manage_app",
        {"app_id": other, "action": "delete"},
        inputResponses={key: YES},
        requestState=state,
    )
    assert moved["error"]["code"] == -32602
    payload, mac = state.rsplit(".", 1)
    forged = await bob.call(
        "manage_app", args, inputResponses={key: YES}, requestState=payload + "." + mac[::-1]
    )
    assert forged["error"]["code"] == -32602
    for still in (app_id, other):
        got = await (await world.caller("bob")).ok("manage_app", app_id=still, action="get")
        assert got["app_id"] == still


async def test_without_elicitation_the_refusal_says_to_pass_confirm(world: World) -> None:
    app_id = await app_of(world)
    bob = await stateless(world, "bob", capabilities={})
    reply = await bob.call("manage_app", {"app_id": app_id, "action": "delete"})
    result = reply["result"]
    assert result["isError"] is True
    assert "confirm" in result["content"][0]["text"]
    done = await bob.call("manage_app", {"app_id": app_id, "action": "delete", "confirm": True})
    assert done["result"]["structuredContent"]["deleted"] is True
