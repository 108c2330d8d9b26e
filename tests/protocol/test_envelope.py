"""The stateless era's envelope, driven with plain dicts: the era rule and every rung of
``protocol/envelope.py``'s table."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from appdeck.protocol import envelope, versions
from appdeck.protocol.envelope import Envelope, Refused
from appdeck.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from appdeck.protocol.jsonrpc import Kind

V = b"2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}


def request(method: str, rid: Any = 7, meta: Any = META, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = dict(params)
    if meta is not None:
        body["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": body}


def accepted(data: object, method: bytes | None, name: bytes | None = None) -> Envelope:
    got = envelope.read(data, V, method, name)
    assert isinstance(got, Envelope), got
    return got


def refused(
    data: object, method: bytes | None, name: bytes | None = None, version: bytes | None = V
) -> Refused:
    got = envelope.read(data, version, method, name)
    assert isinstance(got, Refused), got
    return got


# -- which era ------------------------------------------------------------------------------


def test_a_session_header_keeps_a_post_in_the_handshake_era_whatever_else_it_says() -> None:
    assert not envelope.is_stateless(b"s1", V, request("tools/list"))


@pytest.mark.parametrize("version", [b"2025-11-25", b"2025-06-18", b"2025-03-26", b" 2025-11-25 "])
def test_a_handshake_version_header_is_the_handshake_era(version: bytes) -> None:
    assert not envelope.is_stateless(None, version, request("tools/list"))


@pytest.mark.parametrize("version", [V, b"1900-01-01", b"garbage"])
def test_any_other_version_header_is_the_stateless_era(version: bytes) -> None:
    assert envelope.is_stateless(None, version, {"jsonrpc": "2.0", "id": 1, "method": "x"})


def test_without_a_version_header_the_body_meta_decides() -> None:
    assert envelope.is_stateless(None, None, request("tools/list"))
    assert not envelope.is_stateless(None, None, request("initialize", meta=None))
    assert not envelope.is_stateless(None, None, [request("tools/list")])
    assert not envelope.is_stateless(None, None, request("tools/list", meta={"progressToken": 1}))


# -- the rungs ------------------------------------------------------------------------------


def test_a_complete_request_passes_with_what_its_meta_declares() -> None:
    meta = {
        **META,
        "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
        "io.modelcontextprotocol/logLevel": "warning",
    }
    got = accepted(request("tools/list", meta=meta), b"tools/list")
    assert got.kind is Kind.REQUEST
    assert got.peer.protocol_version == "2026-07-28"
    assert got.peer.declares("elicitation")
    assert not got.peer.declares("sampling")
    assert got.peer.client_info == {"name": "c", "version": "1"}
    assert got.peer.log_level == "warning"


def test_client_info_and_log_level_are_optional() -> None:
    got = accepted(request("tools/list"), b"tools/list")
    assert (got.peer.client_info, got.peer.log_level) == (None, None)


def test_a_batch_is_refused_without_an_id() -> None:
    got = refused([request("tools/list")], b"tools/list")
    assert (got.request_id, got.error.code, got.error.http_status) == (None, INVALID_REQUEST, 400)


def test_a_response_is_refused_the_era_sends_no_requests() -> None:
    got = refused({"jsonrpc": "2.0", "id": 3, "result": {}}, None)
    assert got.error.code == INVALID_REQUEST


@pytest.mark.parametrize(
    "meta",
    [
        None,
        "not an object",
        {"io.modelcontextprotocol/clientCapabilities": {}},
        {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
        {**META, "io.modelcontextprotocol/clientCapabilities": ["sampling"]},
    ],
)
def test_meta_without_version_or_capabilities_is_400_invalid_params_and_echoes_the_id(
    meta: Any,
) -> None:
    got = refused(request("tools/list", rid="r-9", meta=meta), b"tools/list")
    assert (got.request_id, got.error.code, got.error.http_status) == ("r-9", INVALID_PARAMS, 400)


def test_meta_is_checked_before_the_headers() -> None:
    got = refused(request("tools/list", meta=None), None, version=None)
    assert got.error.code == INVALID_PARAMS


@pytest.mark.parametrize(
    ("version", "method", "why"),
    [
        (None, b"tools/list", "MCP-Protocol-Version header is required"),
        (b"2026-07-29", b"tools/list", "MCP-Protocol-Version header does not match"),
        (V, None, "Mcp-Method header is required"),
        (V, b"TOOLS/LIST", "Mcp-Method header does not match"),
        (V, b"prompts/list", "Mcp-Method header does not match"),
    ],
)
def test_a_missing_or_unlike_header_is_400_header_mismatch(
    version: bytes | None, method: bytes | None, why: str
) -> None:
    got = refused(request("tools/list"), method, version=version)
    assert (got.request_id, got.error.code, got.error.http_status) == (7, HEADER_MISMATCH, 400)
    assert why in got.error.message


@pytest.mark.parametrize(
    ("method", "field"),
    [
        ("tools/call", "name"),
        ("prompts/get", "name"),
        ("resources/read", "uri"),
        ("tasks/get", "taskId"),
    ],
)
def test_mcp_name_must_repeat_the_field_its_method_names(method: str, field: str) -> None:
    body = request(method, **{field: "héllo"})
    assert refused(body, method.encode()).error.code == HEADER_MISMATCH  # missing
    assert refused(body, method.encode(), b"other").error.code == HEADER_MISMATCH
    assert refused(body, method.encode(), "héllo".encode()).error.code == HEADER_MISMATCH
    encoded = b"=?base64?" + base64.b64encode("héllo".encode()) + b"?="
    accepted(body, method.encode(), encoded)


def test_header_values_are_trimmed_of_optional_whitespace() -> None:
    accepted(request("tools/call", name="echo"), b" tools/call\t", b"  echo  ")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"=?base64?SGVsbG8=?=", "Hello"),
        (b"=?base64?SGVsbG8?=", None),  # padding missing
        (b"=?base64?SGVs!!!bG8=?=", None),  # not the alphabet
        (b"SGVsbG8=", "SGVsbG8="),  # no wrapper: literal
        (b"=?base64?SGVsbG8=", "=?base64?SGVsbG8="),  # no suffix: literal
        (b"\xff", None),
        (b"x" * 5000, None),
    ],
)
def test_header_value_decodes_base64_strictly_and_takes_the_rest_literally(
    raw: bytes, value: str | None
) -> None:
    assert envelope.header_value(raw) == value


def test_a_name_the_body_does_not_carry_needs_no_header() -> None:
    accepted(request("tools/call"), b"tools/call")  # the handler refuses the missing name


def test_an_unknown_version_is_400_listing_every_version_we_speak() -> None:
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "1900-01-01"}
    got = refused(request("server/discover", meta=meta), b"server/discover", version=b"1900-01-01")
    error = got.error
    assert (got.request_id, error.code, error.http_status) == (7, UNSUPPORTED_PROTOCOL_VERSION, 400)
    assert error.data == {"supported": list(versions.ALL), "requested": "1900-01-01"}
    assert "2026-07-28" in error.data["supported"]
    assert "2025-11-25" in error.data["supported"]


def test_a_handshake_version_in_meta_is_unsupported_in_this_era() -> None:
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "2025-11-25"}
    got = refused(request("tools/list", meta=meta), b"tools/list", version=b"2025-11-25")
    assert got.error.code == UNSUPPORTED_PROTOCOL_VERSION


def test_a_log_level_that_is_not_one_is_invalid_params() -> None:
    meta = {**META, "io.modelcontextprotocol/logLevel": "loud"}
    assert refused(request("tools/list", meta=meta), b"tools/list").error.code == INVALID_PARAMS


@pytest.mark.parametrize("rid", [True, 1.5, {"a": 1}])
def test_an_id_that_is_not_one_is_not_echoed(rid: Any) -> None:
    got = refused(request("tools/list", rid=rid, meta=None), b"tools/list")
    assert got.request_id is None
    assert got.error.code == INVALID_REQUEST


def test_a_long_id_is_echoed_as_sent() -> None:
    got = refused(request("tools/list", rid="x" * 300, meta=None), b"tools/list")
    assert got.request_id == "x" * 300


def test_a_notification_passes_the_rungs_without_an_id() -> None:
    body = request("notifications/cancelled")
    body.pop("id")
    got = accepted(body, b"notifications/cancelled")
    assert got.kind is Kind.NOTIFICATION
