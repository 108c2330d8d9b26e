"""Tool parameters mirrored in ``Mcp-Param-*`` headers (``x-mcp-header``): the annotation
rules checked at registration, and the header checked against the body on each call."""

from __future__ import annotations

from typing import Any

import pytest

from appdeck.protocol.errors import HEADER_MISMATCH, McpError
from appdeck.protocol.param_headers import check, collect, read_annotations


def schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


ANNOTATED = read_annotations(
    schema(
        region={"type": "string", "x-mcp-header": "Region"},
        app_id={"type": "integer", "x-mcp-header": "App-Id"},
        dry={"type": "boolean", "x-mcp-header": "Dry"},
        plain={"type": "string"},
    )
)


def test_annotations_are_read_by_lower_case_header_name() -> None:
    assert ANNOTATED == {
        "region": ("region", "string"),
        "app-id": ("app_id", "integer"),
        "dry": ("dry", "boolean"),
    }


@pytest.mark.parametrize(
    "properties",
    [
        {"a": {"type": "string", "x-mcp-header": "Bad Name"}},
        {"a": {"type": "string", "x-mcp-header": ""}},
        {"a": {"type": "number", "x-mcp-header": "A"}},
        {"a": {"type": "object", "x-mcp-header": "A"}},
        {
            "a": {"type": "string", "x-mcp-header": "Same"},
            "b": {"type": "string", "x-mcp-header": "SAME"},
        },
        {"a": {"type": "object", "properties": {"b": {"type": "string", "x-mcp-header": "B"}}}},
        {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "B"}}},
    ],
)
def test_an_annotation_that_breaks_the_rules_is_refused_at_registration(
    properties: dict[str, Any],
) -> None:
    with pytest.raises(ValueError, match="x-mcp-header"):
        read_annotations(schema(**properties))


def test_collect_keeps_only_mcp_param_headers() -> None:
    sent = {b"mcp-param-region": b"eu", b"mcp-method": b"tools/call", b"x": b"y"}
    assert collect(sent) == {"region": b"eu"}


@pytest.mark.parametrize(
    ("arguments", "headers"),
    [
        ({"region": "eu-west"}, {"region": b"eu-west"}),
        ({"region": "eu-west"}, {"region": b"  eu-west "}),
        ({"region": "Ünïcode"}, {"region": b"=?base64?w5xuw69jb2Rl?="}),
        ({"app_id": 42}, {"app-id": b"42"}),
        ({"app_id": 42}, {"app-id": b"42.0"}),
        ({"dry": True}, {"dry": b"true"}),
        ({"region": None}, {}),
        ({}, {"region": b"ignored when the body has no value"}),
    ],
)
def test_headers_that_repeat_the_body_pass(
    arguments: dict[str, Any], headers: dict[str, bytes]
) -> None:
    check(ANNOTATED, arguments, headers)


@pytest.mark.parametrize(
    ("arguments", "headers"),
    [
        ({"region": "eu-west"}, {}),
        ({"region": "eu-west"}, {"region": b"us-east"}),
        ({"region": "eu-west"}, {"region": b"EU-WEST"}),
        ({"region": "Hello"}, {"region": b"=?base64?SGVsbG8?="}),
        ({"region": "Hello"}, {"region": b"=?base64?SGVs!!!bG8=?="}),
        ({"app_id": 42}, {"app-id": b"43"}),
        ({"app_id": 42}, {"app-id": b"forty-two"}),
        ({"dry": True}, {"dry": b"1"}),
    ],
)
def test_a_missing_or_different_header_is_header_mismatch(
    arguments: dict[str, Any], headers: dict[str, bytes]
) -> None:
    with pytest.raises(McpError) as raised:
        check(ANNOTATED, arguments, headers)
    assert (raised.value.code, raised.value.http_status) == (HEADER_MISMATCH, 400)
