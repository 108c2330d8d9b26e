"""Typed values: what each column type accepts, how each dialect stores it, and back."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from appdeck.common.errors import InvalidArgument
from appdeck.platform.tables.values import from_storage, to_storage


@pytest.mark.parametrize(
    ("type_", "value", "sqlite", "postgresql"),
    [
        ("text", "héllo '\"; --", "héllo '\"; --", "héllo '\"; --"),
        ("integer", -(2**63), -(2**63), -(2**63)),
        ("integer", 3.0, 3, 3),
        ("real", 2, 2.0, 2.0),
        ("boolean", True, 1, True),
        (
            "timestamp",
            "2026-01-31T13:00:00.5+01:00",
            "2026-01-31T12:00:00.500000Z",
            datetime(2026, 1, 31, 12, 0, 0, 500000, tzinfo=UTC),
        ),
        ("json", {"b": [1, None], "a": "é"}, '{"b":[1,null],"a":"é"}', '{"b":[1,null],"a":"é"}'),
        ("uuid", "0B6C8A9E1F2D4C3B9A8E7D6C5B4A3F21", "0b6c8a9e-1f2d-4c3b-9a8e-7d6c5b4a3f21", None),
    ],
)
def test_each_type_is_stored_in_its_dialects_form(
    type_: str, value: Any, sqlite: Any, postgresql: Any
) -> None:
    assert to_storage(value, type_, "sqlite", field="f") == sqlite
    assert to_storage(value, type_, "postgresql", field="f") == (postgresql or sqlite)


@pytest.mark.parametrize(
    ("type_", "value"),
    [
        ("text", 1),
        ("text", "nul\x00"),
        ("text", "\ud800"),
        ("integer", 2**63),
        ("integer", 1.5),
        ("integer", "1"),
        ("integer", False),
        ("real", float("nan")),
        ("real", "1.0"),
        ("real", 2**60),
        ("boolean", 0),
        ("boolean", "true"),
        ("timestamp", "2026-01-31T12:00:00"),
        ("timestamp", 1700000000),
        ("timestamp", "x" * 65),
        ("json", {"a": float("inf")}),
        ("json", {"k": "\x00"}),
        ("json", {1j: 1}),
        ("uuid", "zz"),
        ("uuid", 5),
        ("mystery", "x"),
    ],
)
def test_a_value_outside_its_type_is_refused_naming_row_and_field(type_: str, value: Any) -> None:
    with pytest.raises(InvalidArgument) as refused:
        to_storage(value, type_, "sqlite", field="f", row=3)
    assert refused.value.details == {"field": "f", "row": 3}
    assert refused.value.message.startswith("row 3: f: ")


def test_stored_values_come_back_as_json() -> None:
    assert from_storage(1, "boolean") is True
    assert from_storage(datetime(2026, 1, 1, tzinfo=UTC), "timestamp") == (
        "2026-01-01T00:00:00.000000Z"
    )
    assert from_storage('{"a":1}', "json") == {"a": 1}
    assert from_storage({"a": 1}, "json") == {"a": 1}
    assert from_storage(uuid.UUID(int=1), "uuid") == "00000000-0000-0000-0000-000000000001"
    assert from_storage(None, "text") is None


def test_whatever_an_app_wrote_outside_its_type_comes_back_without_failing() -> None:
    assert from_storage("not json {", "json") == "not json {"
    assert from_storage("abc", "integer") == "abc"
    assert from_storage(b"\xff", "unknown") == "\ufffd"
    assert from_storage(float("inf"), "real") == "inf"
    assert from_storage("yes", "boolean") == "yes"
