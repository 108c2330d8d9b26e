"""Random JSON-RPC thrown at the dispatcher: it always answers with a well-formed response."""

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appdeck.protocol.call import Call

from .conftest import ALICE, Harness

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
methods = st.sampled_from(
    [
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "resources/templates/list",
        "prompts/list",
        "prompts/get",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
        "logging/setLevel",
        "completion/complete",
        "initialize",
        "unknown/method",
    ]
)
params = st.dictionaries(
    st.sampled_from(
        [
            "name",
            "arguments",
            "uri",
            "taskId",
            "cursor",
            "level",
            "ref",
            "argument",
            "task",
            "_meta",
        ]
    ),
    json_values,
    max_size=5,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=methods,
    p=params,
    request_id=st.integers(min_value=0, max_value=2**31) | st.text(max_size=8),
)
async def test_every_request_gets_exactly_one_well_formed_answer(
    harness: Harness, method: str, p: dict[str, Any], request_id: int | str
) -> None:
    session = await harness.init() if method != "initialize" else None
    if method == "tasks/result" and isinstance(p.get("taskId"), str):
        p["taskId"] = "no-such-task"  # a real id would block until the task ends
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": p}
    harness.gate.release.set()
    reply, status, _headers = await harness.server.handle_request(message, Call(ALICE, session))
    assert reply is not None
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == request_id
    assert ("result" in reply) != ("error" in reply)
    if "error" in reply:
        assert isinstance(reply["error"]["code"], int)
        assert isinstance(reply["error"]["message"], str)
        assert status != 500, reply
    for sid in list(harness.sessions_store.rows)[:-1]:
        await harness.sessions.drop(
            harness.sessions.cached(sid) or await harness.sessions_store.load(sid)
        )  # type: ignore[arg-type]
