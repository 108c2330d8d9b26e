"""Output schemas are compact (issue 22) and still self-contained: a result model used more
than once is written once in the schema's own ``$defs``, the ISO twin of every timestamp too,
and every tool's outputSchema is a valid 2020-12 schema whose refs all resolve inside it."""

from __future__ import annotations

import json
from typing import Any, cast

from jsonschema import Draft202012Validator
from pydantic import Field

from appdeck.platform.services import Platform
from appdeck.protocol.registry import Registry
from appdeck.tools import register_all, schemas
from appdeck.tools.kit import Output


class Run(Output):
    number: int
    started_at: float | None = Field(description="When it started.")


class Status(Output):
    last_run: Run | None
    run: Run


class History(Output):
    runs: list[Run]


class Single(Output):
    only: Run


def refs(node: Any) -> list[str]:
    if isinstance(node, list):
        return [r for item in node for r in refs(item)]
    if not isinstance(node, dict):
        return []
    own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
    return own + [r for value in node.values() for r in refs(value)]


def test_a_model_used_twice_is_written_once_in_defs_and_results_still_validate() -> None:
    schema = schemas.output([Status, History])
    Draft202012Validator.check_schema(schema)
    assert set(schema["$defs"]) == {"Run", "iso"}
    assert json.dumps(schema).count('"number": {"type": "integer"}') == 1
    run = {"number": 1, "started_at": 2.0, "started_at_iso": "1970-01-01T00:00:02.000Z"}
    validator = Draft202012Validator(schema)
    validator.validate({"last_run": None, "run": run})
    validator.validate({"runs": [run, run]})
    validator.validate({"error": {"code": "not_found", "message": "no such run"}})
    assert not validator.is_valid({"runs": [{"number": "one"}]})
    assert not validator.is_valid({"run": {**run, "started_at_iso": 3}, "last_run": None})


def test_a_model_used_once_is_inlined_and_needs_no_defs_but_the_iso_twin() -> None:
    schema = schemas.output([Single])
    assert schema["properties"]["only"]["properties"]["number"] == {"type": "integer"}
    assert set(schema["$defs"]) == {"iso"}
    assert refs(schema) == ["#/$defs/iso"]


def test_every_tools_output_schema_is_valid_and_resolves_its_refs_inside_itself() -> None:
    registry = Registry()
    register_all(registry, cast(Platform, None))
    for tool in registry.tools.values():
        schema = tool.output_schema
        assert schema is not None
        Draft202012Validator.check_schema(schema)
        for ref in refs(schema):
            assert ref.startswith("#/$defs/"), (tool.name, ref)
            assert ref.removeprefix("#/$defs/") in schema["$defs"], (tool.name, ref)
        assert "$ref" not in json.dumps(tool.input_schema), tool.name


def test_every_tools_input_and_validation_schemas_are_valid_2020_12_schemas() -> None:
    # register_all tells the registry these are checked (it skips the check at every start):
    # this is where they are
    registry = Registry()
    register_all(registry, cast(Platform, None))
    assert len(registry.tools) >= 26
    for tool in registry.tools.values():
        Draft202012Validator.check_schema(tool.input_schema)
        if tool.validation_schema is not None:
            Draft202012Validator.check_schema(tool.validation_schema)
