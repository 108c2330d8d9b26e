"""whats_next through the HTTP app as an agent uses it: every result (errors included) fits
the outputSchema, and every suggested step is a call the target tool accepts as is (once its
placeholders are filled in) and that the caller's token and role may make."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from appdeck.auth import scopes
from appdeck.platform.advice.state import Caller
from appdeck.platform.advice.steps import NEEDS, Step, advise, advise_account
from appdeck.protocol.registry import Registry, ToolDef
from appdeck.tools import register_all
from tests.platform.advice.test_steps import CASES
from tests.platform.repos.gitrepo import bare_repo
from tests.tools.conftest import Caller as HttpCaller
from tests.tools.conftest import World

ISSUE_12 = frozenset({"discover_apis"})
"""Tools a step may name before they exist: issue 12's, suggested only when its port says so."""


def _registry() -> Registry:
    registry = Registry()
    register_all(registry, None)  # type: ignore[arg-type]  # the schemas need no platform
    return registry


def _input_schema(tool: ToolDef) -> dict[str, Any]:
    return tool.validation_schema or tool.input_schema


def _every_step() -> list[Step]:
    found = [step for _, state, _, _ in CASES for step in advise(state).steps]
    owner = Caller("owner", None)
    found += advise_account(owner, [], empty=True).steps
    return found


def test_every_suggested_step_validates_against_its_tools_input_schema() -> None:
    registry = _registry()
    steps = _every_step()
    assert {s.tool for s in steps} >= {"connect_repo", "deploy_app", "manage_ci", "register_app"}
    for step in steps:
        if step.tool in ISSUE_12 and step.tool not in registry.tools:
            continue
        schema = _input_schema(registry.tools[step.tool])
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(step.arguments)]
        assert errors == [], (step.tool, step.arguments, errors)


def test_what_a_step_needs_is_what_its_tool_needs() -> None:
    registry = _registry()
    for (name, action), (needed, _role) in NEEDS.items():
        if name in ISSUE_12 and name not in registry.tools:
            continue
        tool = registry.tools[name]
        extra = tool.action_scopes.get(action) if action is not None else None
        expected = {tool.scope} | ({extra} if extra else set())
        assert set(needed) == expected, (name, action)


async def _checked(caller: HttpCaller, **arguments: Any) -> dict[str, Any]:
    result = await caller.tool("whats_next", **arguments)
    listed = await caller.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == "whats_next"]
    Draft202012Validator(tool["outputSchema"]).validate(result["structuredContent"])
    return result


async def _next(caller: HttpCaller, **arguments: Any) -> dict[str, Any]:
    result = await _checked(caller, **arguments)
    assert not result.get("isError"), result
    return dict(result["structuredContent"])


async def _refused(caller: HttpCaller, **arguments: Any) -> str:
    result = await _checked(caller, **arguments)
    assert result.get("isError") is True, result
    return str(result["structuredContent"]["error"]["code"])


def _fill(step: dict[str, Any], **values: Any) -> dict[str, Any]:
    """The step's arguments with its placeholders (``fill_in``) replaced."""
    arguments = dict(step["arguments"])
    for path in step["fill_in"]:
        head, _, rest = path.partition(".")
        if rest:
            arguments[head] = {**arguments[head], rest: values[rest]}
        else:
            arguments[head] = values[head]
    return arguments


async def test_following_the_steps_takes_a_new_app_to_ready(world: World) -> None:
    repo = bare_repo(world.source.parent, "shop.git")
    repo.commit({"app.py": "print('v1')\n"}, "v1")
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    found = await _next(alice, app_id=app_id)
    assert (found["status"], found["apps"][0]["name"]) == ("needs_source", "shop")
    assert [s["priority"] for s in found["steps"]] == [1, 2]
    connect, spec = found["steps"]
    assert connect["tool"] == "connect_repo"
    assert "<your repo URL>" in connect["arguments"].values()
    await alice.ok("connect_repo", **_fill(connect, url=str(repo.bare)))
    await alice.ok("set_app_spec", **_fill(spec, run_command="python3 app.py"))
    found = await _next(alice, app_id=app_id)
    assert found["status"] == "not_deployed"
    assert [s["tool"] for s in found["steps"]] == ["preflight_check", "deploy_app", "manage_ci"]
    assert all(s["app_id"] == app_id for s in found["steps"])
    checked = await alice.ok("preflight_check", **found["steps"][0]["arguments"])
    assert checked["app_id"] == app_id


async def test_the_account_is_paginated_over_apps(world: World) -> None:
    alice = await world.caller("alice")
    empty = await _next(alice)
    assert (empty["status"], [s["tool"] for s in empty["steps"]]) == ("no_apps", ["register_app"])
    ids = [(await alice.ok("register_app", name=f"app{i}"))["app_id"] for i in range(3)]
    first = await _next(alice, limit=2)
    assert [a["app_id"] for a in first["apps"]] == ids[:2]
    assert [(s["tool"], s["app_id"]) for s in first["steps"]] == [
        ("connect_repo", ids[0]),
        ("connect_repo", ids[1]),
    ]
    second = await _next(alice, limit=2, cursor=first["next_cursor"])
    assert [a["app_id"] for a in second["apps"]] == ids[2:]
    assert "next_cursor" not in second


async def test_roles_scopes_and_tenants(world: World) -> None:
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    eve = await world.caller("eve", tenant="globex")
    assert await _refused(eve, app_id=app_id) == "not_found"
    bob = await world.caller("bob")
    assert await _refused(bob, app_id=app_id) == "not_found"
    await alice.ok("manage_app", action="grant", app_id=app_id, user="bob", role="viewer")
    viewed = await _next(bob, app_id=app_id)
    assert (viewed["steps"], viewed["withheld"]) == ([], 2)
    reader = await world.caller("alice", scope=scopes.render(set(scopes.READ_ONLY)))
    read_only = await _next(reader, app_id=app_id)
    assert (read_only["steps"], read_only["withheld"]) == ([], 2)
    assert "ask an owner or admin" in read_only["summary"]


async def test_absurd_arguments_are_clear_errors_that_fit_the_output_schema(world: World) -> None:
    alice = await world.caller("alice")
    for arguments in (
        {"app_id": 0},
        {"app_id": -1},
        {"app_id": 2**63},
        {"app_id": "1"},
        {"limit": 0},
        {"limit": 21},
        {"cursor": "not a cursor\n\x00"},
        {"cursor": "x" * 100_000},
        {"bogus": 1},
    ):
        assert await _refused(alice, **arguments) == "invalid_argument", arguments
    assert await _refused(alice, app_id=2**63 - 1) == "not_found"
