"""The registry's schema check: once per distinct schema in a process, never a bad one let in."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from appdeck.protocol import registry
from appdeck.protocol.registry import Registry, ToolDef, check_schema


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The schemas the meta-schema check really ran on (the memory emptied first)."""
    seen: list[Any] = []
    real = Draft202012Validator.check_schema

    def counting(schema: Any) -> None:
        seen.append(schema)
        real(schema)

    monkeypatch.setattr(registry, "_checked", set())
    monkeypatch.setattr(registry.Draft202012Validator, "check_schema", counting)
    return seen


async def _nothing(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return {}


def _tool(name: str, schema: dict[str, Any]) -> ToolDef:
    return ToolDef(name, "a tool", schema, _nothing)


def test_a_schema_registered_by_a_second_server_is_not_checked_again(checks: list[Any]) -> None:
    def schema() -> dict[str, Any]:  # each server builds its own, equal
        return {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}

    Registry().add_tool(_tool("one", schema()))
    Registry().add_tool(_tool("one", schema()))
    assert checks == [schema()]


def test_a_bad_schema_is_refused_every_time(checks: list[Any]) -> None:
    bad = {"type": "object", "properties": {"n": {"type": "no such type"}}}
    for _ in range(2):
        with pytest.raises(SchemaError):
            Registry().add_tool(_tool("bad", bad))
    assert len(checks) == 2


def test_a_tuple_is_not_taken_for_the_list_that_passed(checks: list[Any]) -> None:
    check_schema({"type": "object", "required": ["a"]})
    with pytest.raises(SchemaError):
        check_schema({"type": "object", "required": ("a",)})  # not a JSON array
    assert len(checks) == 2


def test_a_string_is_not_taken_for_the_number_that_passed(checks: list[Any]) -> None:
    check_schema({"type": "string", "minLength": 1})
    with pytest.raises(SchemaError):
        check_schema({"type": "string", "minLength": "1"})
    assert len(checks) == 2


def test_a_schema_holding_something_else_than_json_is_checked_every_time(
    checks: list[Any],
) -> None:
    class Text(str):
        pass

    schema = {"type": Text("string")}
    check_schema(schema)
    check_schema(schema)
    assert len(checks) == 2


def test_the_memory_is_bounded(checks: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "MAX_CHECKED", 3)
    for n in range(10):
        check_schema({"type": "integer", "minimum": n})
    assert len(registry._checked) <= 3
    check_schema({"type": "integer", "minimum": 9})  # the last one is still remembered
    assert len(checks) == 10


def test_schemas_a_caller_says_are_checked_are_not_checked_again(checks: list[Any]) -> None:
    bad = {"type": "object", "properties": {"n": {"type": "no such type"}}}
    Registry().add_tool(_tool("trusted", bad), schemas_checked=True)
    assert checks == []
