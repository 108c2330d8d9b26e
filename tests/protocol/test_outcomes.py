"""Each answered request is counted under one word of a small fixed set."""

from __future__ import annotations

from typing import Any

import pytest

from appdeck.protocol import outcomes


def result(body: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "result": body}


def error(code: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": "no"}}


@pytest.mark.parametrize(
    ("response", "status", "outcome"),
    [
        (result({"tools": []}), 200, "ok"),
        (result({"content": [], "isError": False}), 200, "ok"),
        (result({"content": [], "isError": True}), 200, "tool_error"),
        (result({"task": {"taskId": "t", "status": "working"}}), 200, "task"),
        (result({"resultType": "task", "taskId": "t"}), 200, "task"),
        (result({"resultType": "input_required", "inputRequests": {}}), 200, "input_required"),
        (None, 202, "cancelled"),
        (error(-32003), 403, "denied"),
        (error(-32000), 401, "denied"),
        (error(-32004), 429, "limited"),
        (error(-32602), 200, "invalid"),
        (error(-32601), 404, "invalid"),
        (error(-32000), 400, "invalid"),  # a session header missing: the client's mistake
        (error(-32022), 400, "invalid"),
        (error(-32603), 200, "failed"),
        (error(-32603), 500, "failed"),
    ],
)
def test_a_response_and_its_status_make_one_outcome(
    response: dict[str, Any] | None, status: int, outcome: str
) -> None:
    assert outcomes.of(response, status) == outcome
    assert outcome in outcomes.OUTCOMES


def test_an_error_that_is_not_an_object_is_still_counted() -> None:
    assert outcomes.of({"jsonrpc": "2.0", "id": 1, "error": "boom"}, 500) == "failed"
    assert outcomes.of({"jsonrpc": "2.0", "id": 1, "error": "boom"}, 400) == "invalid"
