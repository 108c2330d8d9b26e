"""The app spec: validation with defaults, merge patches, diffs, and the schemas tools show."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from appdeck.common.errors import InvalidArgument
from appdeck.model import specs


def test_a_valid_spec_gets_every_default() -> None:
    complete = specs.validate({"run_command": "python3 app.py"})
    assert complete["runtime"] == "python"
    assert complete["canary"]["steps"] == [10, 50, 100]
    assert complete["port"] is None


def test_an_invalid_spec_names_where() -> None:
    with pytest.raises(InvalidArgument) as refused:
        specs.validate({"instances": 0})
    assert "instances" in refused.value.message


def test_null_resets_an_object_field_to_its_default_and_the_diff_says_what_changed() -> None:
    base = specs.validate({"canary": {"percent": 20}})
    merged = specs.merge(base, {"canary": None, "instances": 2})
    assert merged["canary"] == specs.DEFAULTS["canary"]
    assert {c["path"] for c in specs.diff(base, merged)} == {"/canary/percent", "/instances"}


def test_no_schema_spells_a_type_as_an_array() -> None:
    for schema in (specs.SPEC_SCHEMA, specs.patch_schema(), specs.full_schema()):
        assert '"type": [' not in json.dumps(schema)


def test_the_patch_schema_takes_null_where_merge_resets_and_nowhere_else() -> None:
    patch = Draft202012Validator(specs.patch_schema())
    assert patch.is_valid({"canary": None, "health_check": None, "source_path": None})
    assert not patch.is_valid({"runtime": None})
    assert not patch.is_valid({"instances": 0})
    assert not patch.is_valid({"unknown": 1})


def test_a_json_copy_shares_nothing_mutable_with_its_source() -> None:
    source = {"a": [1, {"b": None, "c": 2.5}], "d": "x", "e": True, "f": 2**70}
    copied = specs.json_copy(source)
    assert copied == source
    copied["a"][1]["b"] = "changed"
    copied["a"].append(3)
    assert source == {"a": [1, {"b": None, "c": 2.5}], "d": "x", "e": True, "f": 2**70}
