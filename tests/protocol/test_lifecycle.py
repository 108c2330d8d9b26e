import pytest

import appdeck
from appdeck.protocol.call import Call
from appdeck.protocol.errors import FORBIDDEN, INVALID_PARAMS, METHOD_NOT_FOUND, McpError
from appdeck.protocol.instructions import INSTRUCTIONS

from .conftest import ALICE, BOB, Harness


async def test_initialize_creates_a_session_owned_by_the_caller(harness: Harness) -> None:
    call = Call(ALICE, None)
    reply = await harness.request(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
        call=call,
    )
    result = reply["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"]["name"] == "appdeck-mcp"
    assert result["serverInfo"]["version"] == appdeck.__version__
    assert result["sessionId"] == call.session.id  # type: ignore[union-attr]
    assert result["capabilities"]["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    assert result["capabilities"]["resources"] == {"listChanged": True, "subscribe": True}
    assert result["capabilities"]["prompts"] == {"listChanged": True}
    assert result["capabilities"]["tools"] == {}
    assert harness.sessions_store.rows[result["sessionId"]].owner == ("acme", "alice")


async def test_initialize_gives_agents_instructions_on_first_call_sources_tasks_and_confirmations(
    harness: Harness,
) -> None:
    reply = await harness.request(
        "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}, call=Call(ALICE, None)
    )
    text = reply["result"]["instructions"]
    assert text == INSTRUCTIONS
    assert "Call whats_next first" in text
    for source in ("source root", "git repository", "inline files", "git push"):
        assert source in text
    assert "run as tasks" in text
    assert "progress" in text
    assert "confirmation" in text
    assert len(text) < 1000  # clients may put it in every prompt


async def test_initialize_without_a_protocol_version_is_invalid_params(harness: Harness) -> None:
    reply = await harness.request("initialize", {"capabilities": {}}, call=Call(ALICE, None))
    assert reply["error"]["code"] == INVALID_PARAMS


async def test_an_unknown_version_is_answered_with_the_latest(harness: Harness) -> None:
    reply = await harness.request(
        "initialize", {"protocolVersion": "2000-01-01"}, call=Call(ALICE, None)
    )
    assert reply["result"]["protocolVersion"] == "2025-11-25"


async def test_the_session_cap_gives_a_clear_error(harness: Harness) -> None:
    for _ in range(3):
        await harness.init()
    _, status, _ = await harness.server.handle_request(
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25"},
        },
        Call(ALICE, None),
    )
    assert status == 503


async def test_ping_answers_an_empty_result(harness: Harness) -> None:
    session = await harness.init()
    assert (await harness.request("ping", session=session, principal=None))["result"] == {}


async def test_an_unknown_method_is_method_not_found(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request("nope/nothing", session=session)
    assert reply["error"]["code"] == METHOD_NOT_FOUND


async def test_set_level_rejects_an_unknown_level(harness: Harness) -> None:
    session = await harness.init()
    assert (await harness.request("logging/setLevel", {"level": "loud"}, session=session))["error"][
        "code"
    ] == INVALID_PARAMS
    assert (await harness.request("logging/setLevel", {"level": "error"}, session=session))[
        "result"
    ] == {}
    assert session.log_level == "error"


async def test_another_owner_using_a_session_is_forbidden_and_the_session_is_dropped(
    harness: Harness,
) -> None:
    session = await harness.init(ALICE)
    with pytest.raises(McpError) as refused:
        await harness.server.session_for(session.id, BOB)
    assert refused.value.code == FORBIDDEN
    assert refused.value.http_status == 403
    assert session.id not in harness.sessions_store.rows
    assert await harness.sessions.get(session.id) is None
    assert session.id in harness.outbox.closed


async def test_completion_offers_matching_values(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request(
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "greet"},
            "argument": {"name": "who", "value": "al"},
        },
        session=session,
    )
    assert reply["result"]["completion"] == {
        "values": ["alice", "albert"],
        "total": 2,
        "hasMore": False,
    }


async def test_idle_sessions_expire(harness: Harness) -> None:
    clock = [1000.0]
    harness.sessions._clock = lambda: clock[0]
    session = await harness.init()
    clock[0] += 61
    assert await harness.sessions.sweep() == 1
    assert await harness.sessions.get(session.id) is None
