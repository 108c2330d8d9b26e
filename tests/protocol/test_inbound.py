"""The inbound step, driven with plain dicts: every rule of ``protocol/inbound.py``'s table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from appdeck.common.identity import Principal
from appdeck.protocol import inbound
from appdeck.protocol.errors import (
    FORBIDDEN,
    INVALID_PARAMS,
    INVALID_REQUEST,
    SERVER_ERROR,
    SESSION_NOT_FOUND,
    McpError,
)
from appdeck.protocol.inbound import Route

from .conftest import ALICE, BOB, Harness


def request(method: str, rid: int = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def notification(method: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method}


def routed(data: object, session: bytes | None = b"s1", version: bytes | None = None) -> Route:
    route = inbound.read(data, session, version)
    assert isinstance(route, Route), route
    return route


def rejected(data: object, session: bytes | None = b"s1", version: bytes | None = None) -> McpError:
    route = inbound.read(data, session, version)
    assert isinstance(route, McpError), route
    return route


def test_one_request_is_routed_with_its_session_and_needs_a_token() -> None:
    route = routed(request("tools/call", name="echo"))
    assert route.messages == [request("tools/call", name="echo")]
    assert (route.batch, route.needs_token, route.wants_session) == (False, True, True)
    assert (route.session_id, route.label) == ("s1", "tools/call")


def test_initialize_needs_a_token_but_no_session() -> None:
    route = routed(request("initialize"), session=None)
    assert route.needs_token
    assert not route.wants_session


def test_a_lone_ping_without_a_session_header_needs_neither_token_nor_session() -> None:
    route = routed(request("ping"), session=None)
    assert not route.needs_token
    assert not route.wants_session


def test_a_ping_with_a_session_header_still_has_its_session_checked() -> None:
    route = routed(request("ping"))
    assert not route.needs_token
    assert route.wants_session


def test_the_open_notification_needs_no_token() -> None:
    assert not routed(notification("notifications/initialized")).needs_token
    assert routed(notification("notifications/cancelled")).needs_token


def test_a_response_from_the_client_needs_a_token_and_its_session() -> None:
    route = routed({"jsonrpc": "2.0", "id": 3, "result": {}})
    assert route.needs_token
    assert route.wants_session
    assert route.label is None


def test_an_unsupported_version_header_is_400_before_anything_else() -> None:
    error = rejected("not even a message", version=b"1999-01-01")
    assert (error.http_status, error.code) == (400, SERVER_ERROR)
    assert "Unsupported protocol version: 1999-01-01" in error.message
    assert "2025-11-25" in error.message


@pytest.mark.parametrize("version", [b"2025-11-25", b"2025-06-18", b"2025-03-26"])
def test_every_supported_version_header_is_accepted(version: bytes) -> None:
    routed(request("tools/list"), version=version)


def test_the_version_header_check_is_shared_with_get_and_delete() -> None:
    assert inbound.version_rejection(None) is None
    assert inbound.version_rejection(b"2025-03-26") is None
    refused = inbound.version_rejection(b"2026-07-28")
    assert refused is not None
    assert refused.http_status == 400


@pytest.mark.parametrize(
    "data",
    [
        "text",
        42,
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]},
        [request("ping"), "not a message"],
    ],
)
def test_anything_but_json_rpc_2_0_is_an_invalid_request(data: object) -> None:
    error = rejected(data)
    assert (error.http_status, error.code) == (400, INVALID_REQUEST)


def test_an_empty_batch_is_an_invalid_request() -> None:
    error = rejected([])
    assert (error.http_status, error.code, error.message) == (
        400,
        INVALID_REQUEST,
        "Invalid Request: empty batch",
    )


def test_initialize_inside_a_batch_is_refused() -> None:
    error = rejected([request("initialize"), notification("notifications/initialized")])
    assert (error.http_status, error.code) == (400, INVALID_REQUEST)
    assert "Only one initialization request" in error.message


def test_a_batch_is_routed_as_one_call_needing_a_token_when_any_message_does() -> None:
    route = routed([request("ping", 1), request("tools/list", 2), notification("x/y")])
    assert route.batch
    assert route.needs_token
    assert route.label == "batch"
    assert len(route.kinds) == 3


def test_a_batch_of_open_methods_needs_no_token() -> None:
    route = routed([request("ping", 1), notification("notifications/initialized")])
    assert not route.needs_token


def test_a_batch_of_one_is_still_a_batch() -> None:
    route = routed([request("tools/list")])
    assert route.batch
    assert route.label == "tools/list"


def test_batches_are_admitted_only_on_2025_03_26_sessions() -> None:
    batch = routed([request("ping", 1), request("tools/list", 2)])
    assert inbound.admit(batch, "2025-03-26") is None
    refused = inbound.admit(batch, "2025-11-25")
    assert refused is not None
    assert (refused.http_status, refused.code) == (400, INVALID_REQUEST)
    assert refused.message.endswith("2025-11-25")
    assert inbound.admit(batch, None) is not None  # no session: judged by the latest version
    assert inbound.admit(routed(request("ping")), "2025-11-25") is None


# -- the core opens the call: session header, session, owner (once) --------------------------


async def test_a_session_bound_message_without_the_header_is_400(harness: Harness) -> None:
    with pytest.raises(McpError) as refused:
        await harness.server.open(routed(request("tools/list"), session=None), ALICE)
    assert (refused.value.http_status, refused.value.code) == (400, SERVER_ERROR)


async def test_an_unknown_session_is_404(harness: Harness) -> None:
    with pytest.raises(McpError) as refused:
        await harness.server.open(routed(request("tools/list"), session=b"nope"), ALICE)
    assert (refused.value.http_status, refused.value.code) == (404, SESSION_NOT_FOUND)


async def test_another_owner_is_refused_once_audited_and_the_session_dropped(
    harness: Harness,
) -> None:
    audit = RecordingAudit()
    harness.server.audit = audit
    session = await harness.init(ALICE)
    batch = routed([request("ping", 1), request("tools/list", 2)], session=session.id.encode())
    with pytest.raises(McpError) as refused:
        await harness.server.open(batch, BOB)
    assert (refused.value.http_status, refused.value.code) == (403, FORBIDDEN)
    assert audit.refusals == [(BOB, 403, "session owner mismatch: session dropped", None, None)]
    assert await harness.sessions.get(session.id) is None


async def test_a_batch_on_a_2025_11_25_session_is_refused_after_the_session_is_found(
    harness: Harness,
) -> None:
    session = await harness.init(ALICE)
    batch = routed([request("ping", 1), request("tools/list", 2)], session=session.id.encode())
    with pytest.raises(McpError) as refused:
        await harness.server.open(batch, ALICE)
    assert refused.value.code == INVALID_REQUEST


async def test_the_opened_call_carries_the_caller_and_the_session(harness: Harness) -> None:
    session = await harness.init(ALICE)
    call = await harness.server.open(routed(request("tools/list"), session.id.encode()), ALICE)
    assert call.principal == ALICE
    assert call.session is session


# -- what handle_request reports: step-up headers, audit records -----------------------------


class RecordingAudit:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.refusals: list[tuple[Any, ...]] = []

    def tool_called(self, principal: Principal | None, *args: Any) -> None:
        self.calls.append((principal, *args))

    def refused(
        self,
        principal: Principal | None,
        status: int,
        reason: str,
        method: str | None = None,
        tool: str | None = None,
    ) -> None:
        self.refusals.append((principal, status, reason, method, tool))


@pytest.fixture
async def naming_metadata() -> AsyncIterator[Harness]:
    """The server names its resource metadata (RFC 9728) in step-up challenges."""
    h = Harness(resource_metadata_url="https://deck.example/.well-known/oauth-pr")
    yield h
    await h.tasks.shutdown()


async def test_a_tool_outside_the_scopes_carries_its_step_up_challenge(
    naming_metadata: Harness,
) -> None:
    bob = await naming_metadata.init(BOB)
    call = await naming_metadata.server.open(
        routed(request("tools/call", name="deploy"), bob.id.encode()), BOB
    )
    reply, status, headers = await naming_metadata.server.handle_request(
        request("tools/call", name="deploy"), call
    )
    assert status == 403
    assert reply is not None
    assert reply["error"]["data"] == {"scope": "deploy:write"}
    assert headers == [
        (
            b"www-authenticate",
            b'Bearer error="insufficient_scope", scope="deploy:write", '
            b'resource_metadata="https://deck.example/.well-known/oauth-pr"',
        )
    ]


async def test_every_tool_call_is_audited_by_the_core_with_its_outcome(harness: Harness) -> None:
    audit = RecordingAudit()
    harness.server.audit = audit
    session = await harness.init(ALICE)
    await harness.request(
        "tools/call",
        {"name": "echo", "arguments": {"text": "hi", "action": "get", "app_id": 7}},
        session=session,
    )
    await harness.request("tools/call", {"name": "missing"}, session=session)
    await harness.request("tools/call", {"name": "nope"}, session=session)
    await harness.request("tools/list", session=session)
    assert [c[1:5] for c in audit.calls] == [
        ("echo", "get", 7, False),
        ("missing", None, None, True),  # a tool error result
        ("nope", None, None, True),  # a protocol error (unknown tool)
    ]
    principal, _tool, _action, _app, _failed, status, duration, request_id, task = audit.calls[0]
    assert principal == ALICE
    assert status == 200
    assert duration >= 0
    assert isinstance(request_id, str)
    assert task is False
    assert audit.refusals == []


async def test_a_refused_request_is_audited_as_a_refusal(harness: Harness) -> None:
    audit = RecordingAudit()
    harness.server.audit = audit
    bob = await harness.init(BOB)
    await harness.request("tools/call", {"name": "deploy"}, session=bob, principal=BOB)
    assert audit.calls == []
    [(who, status, reason, method, tool)] = audit.refusals
    assert (who, status, method, tool) == (BOB, 403, "tools/call", "deploy")
    assert "deploy:write" in reason


async def test_a_tool_call_whose_params_are_not_an_object_is_refused_and_audited(
    harness: Harness,
) -> None:
    audit = RecordingAudit()
    harness.server.audit = audit
    session = await harness.init(ALICE)
    reply = await harness.request("tools/call", ["echo", {"text": "hi"}], session=session)  # type: ignore[arg-type]
    assert reply["error"]["code"] == INVALID_PARAMS
    [(principal, tool, action, app_id, failed, *_rest)] = audit.calls
    assert (principal, tool, action, app_id, failed) == (ALICE, None, None, None, True)
