import asyncio

from appdeck.protocol.errors import FORBIDDEN, INVALID_PARAMS, METHOD_NOT_FOUND
from tests.support.wait import until

from .conftest import ALICE, BOB, Harness
from .doubles import RecordingChannel


async def test_tools_list_shows_only_tools_the_token_may_use(harness: Harness) -> None:
    alice = await harness.init(ALICE)
    bob = await harness.init(BOB)
    alice_tools = {
        t["name"] for t in (await harness.request("tools/list", session=alice))["result"]["tools"]
    }
    bob_tools = {
        t["name"]
        for t in (await harness.request("tools/list", session=bob, principal=BOB))["result"][
            "tools"
        ]
    }
    assert "deploy" in alice_tools
    assert "deploy" not in bob_tools


async def test_task_capable_tools_say_so(harness: Harness) -> None:
    session = await harness.init()
    tools = {
        t["name"]: t
        for t in (await harness.request("tools/list", session=session))["result"]["tools"]
    }
    assert tools["echo"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in tools["missing"]


async def test_calling_a_tool_without_its_scope_is_insufficient_scope(harness: Harness) -> None:
    bob = await harness.init(BOB)
    _, status, _ = await harness.server.handle_request(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "deploy", "arguments": {}},
        },
        __import__("appdeck.protocol.call", fromlist=["Call"]).Call(BOB, bob),
    )
    assert status == 403
    reply = await harness.request(
        "tools/call", {"name": "deploy", "arguments": {}}, session=bob, principal=BOB
    )
    assert reply["error"]["code"] == FORBIDDEN
    assert reply["error"]["data"] == {"scope": "deploy:write"}


async def test_a_tool_call_returns_the_tool_result(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request(
        "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, session=session
    )
    assert reply["result"]["content"] == [{"type": "text", "text": "hi"}]


async def test_an_unknown_tool_is_invalid_params(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request("tools/call", {"name": "nope"}, session=session)
    assert reply["error"]["code"] == INVALID_PARAMS


async def test_bad_arguments_are_a_tool_error_the_model_can_read(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request(
        "tools/call", {"name": "echo", "arguments": {"text": 5}}, session=session
    )
    result = reply["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_argument"


async def test_a_domain_error_keeps_its_code_and_hint(harness: Harness) -> None:
    session = await harness.init()
    result = (await harness.request("tools/call", {"name": "missing"}, session=session))["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == {
        "code": "not_found",
        "message": "no app 42",
        "hint": "list_my_apps shows your apps",
    }


async def test_a_crash_never_leaks_library_text(harness: Harness) -> None:
    session = await harness.init()
    result = (await harness.request("tools/call", {"name": "crash"}, session=session))["result"]
    assert result["isError"] is True
    assert "secret" not in str(result)
    assert result["structuredContent"]["error"]["code"] == "internal"


async def test_progress_and_logs_go_to_the_request_stream(harness: Harness) -> None:
    session = await harness.init()
    channel = RecordingChannel()
    harness.gate.release.set()
    reply = await harness.request(
        "tools/call",
        {"name": "slow", "_meta": {"progressToken": "p1"}},
        session=session,
        channel=channel,
    )
    assert reply["result"]["content"][0]["text"] == "slow done"
    methods = [m["method"] for m in channel.messages]
    assert methods == ["notifications/progress", "notifications/message", "notifications/progress"]
    assert channel.messages[0]["params"] == {
        "progressToken": "p1",
        "progress": 1,
        "total": 2,
        "message": "halfway",
    }


async def test_log_level_filters_log_notifications(harness: Harness) -> None:
    session = await harness.init()
    await harness.request("logging/setLevel", {"level": "error"}, session=session)
    channel = RecordingChannel()
    harness.gate.release.set()
    await harness.request("tools/call", {"name": "slow"}, session=session, channel=channel)
    assert channel.messages == []


async def test_a_cancelled_call_gets_no_response(harness: Harness) -> None:
    session = await harness.init()
    call = __import__("appdeck.protocol.call", fromlist=["Call"]).Call(ALICE, session)
    msg = {"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "slow"}}
    running = asyncio.create_task(harness.server.handle_request(msg, call))
    async with asyncio.timeout(5):
        await harness.gate.entered.wait()
    await harness.server.handle_notification(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77}}, call
    )
    async with asyncio.timeout(5):
        reply, status, _ = await running
    assert reply is None
    assert status == 202


async def test_a_required_task_tool_called_plainly_is_method_not_found(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request("tools/call", {"name": "only_task"}, session=session)
    assert reply["error"]["code"] == METHOD_NOT_FOUND


async def test_a_forbidden_task_tool_called_as_a_task_is_method_not_found(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request("tools/call", {"name": "missing", "task": {}}, session=session)
    assert reply["error"]["code"] == METHOD_NOT_FOUND


async def test_elicitation_round_trips_through_the_client(harness: Harness) -> None:
    session = await harness.init(caps={"elicitation": {}})
    channel = RecordingChannel()
    call = __import__("appdeck.protocol.call", fromlist=["Call"]).Call(ALICE, session, channel)
    msg = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "ask"}}
    running = asyncio.create_task(harness.server.handle_request(msg, call))
    await until(lambda: channel.messages)
    outgoing = channel.messages[0]
    assert outgoing["method"] == "elicitation/create"
    assert outgoing["params"]["requestedSchema"]["properties"]["name"] == {"type": "string"}
    await harness.server.handle_response(
        {
            "jsonrpc": "2.0",
            "id": outgoing["id"],
            "result": {"action": "accept", "content": {"name": "Ada"}},
        },
        call,
    )
    async with asyncio.timeout(5):
        reply, _, _ = await running
    assert reply is not None
    assert reply["result"]["content"][0]["text"] == "hello Ada"


async def test_elicitation_without_the_client_capability_is_a_tool_error(harness: Harness) -> None:
    session = await harness.init()
    result = (await harness.request("tools/call", {"name": "ask"}, session=session))["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "failed_precondition"


async def test_each_action_of_a_multi_action_tool_checks_its_own_scope(harness: Harness) -> None:
    from appdeck.protocol.registry import ToolDef

    from .conftest import echo

    harness.registry.add_tool(
        ToolDef(
            "manage_thing",
            "get or delete a thing",
            {"type": "object"},
            echo,
            scope="apps:read",
            action_scopes={"delete": "apps:write"},
        )
    )
    bob = await harness.init(BOB)  # apps:read only
    ok = await harness.request(
        "tools/call",
        {"name": "manage_thing", "arguments": {"action": "get", "text": "x"}},
        session=bob,
        principal=BOB,
    )
    assert ok["result"]["content"][0]["text"] == "x"
    refused = await harness.request(
        "tools/call",
        {"name": "manage_thing", "arguments": {"action": "delete"}},
        session=bob,
        principal=BOB,
    )
    assert refused["error"]["code"] == FORBIDDEN
    assert refused["error"]["data"] == {"scope": "apps:write"}
