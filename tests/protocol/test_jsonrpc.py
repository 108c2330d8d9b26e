import pytest

from appdeck.protocol.errors import InvalidRequest
from appdeck.protocol.jsonrpc import Kind, classify


def test_a_request_has_a_method_and_an_id() -> None:
    assert classify({"jsonrpc": "2.0", "id": 1, "method": "ping"}) is Kind.REQUEST
    assert classify({"jsonrpc": "2.0", "id": "a", "method": "ping", "params": {}}) is Kind.REQUEST


def test_a_notification_has_no_id() -> None:
    assert classify({"jsonrpc": "2.0", "method": "notifications/initialized"}) is Kind.NOTIFICATION


def test_a_response_has_exactly_one_of_result_and_error() -> None:
    assert classify({"jsonrpc": "2.0", "id": 1, "result": {}}) is Kind.RESPONSE
    assert (
        classify({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "x"}}) is Kind.RESPONSE
    )
    with pytest.raises(InvalidRequest):
        classify({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}})


@pytest.mark.parametrize(
    "message",
    [
        [],
        "ping",
        {"id": 1, "method": "ping"},
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": True, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": ""},
        {"jsonrpc": "2.0", "id": 1, "method": 7},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]},
        {"jsonrpc": "2.0"},
    ],
)
def test_anything_else_is_an_invalid_request(message: object) -> None:
    with pytest.raises(InvalidRequest):
        classify(message)
