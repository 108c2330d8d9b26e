"""What the core gives its tracing port of a request: the client's W3C trace context, only as
strings of a sane length, and an answer's error text, cut."""

from __future__ import annotations

from appdeck.protocol.trace_context import MAX_ERROR, error_text, trace_carrier

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_trace_context_in_meta_is_the_carrier() -> None:
    params = {"name": "t", "_meta": {"traceparent": PARENT, "tracestate": "k=v", "other": 1}}
    assert trace_carrier(params) == {"traceparent": PARENT, "tracestate": "k=v"}


def test_no_meta_or_no_traceparent_is_an_empty_carrier() -> None:
    assert trace_carrier(None) == {}
    assert trace_carrier({"name": "t"}) == {}
    assert trace_carrier({"_meta": "nope"}) == {}
    assert trace_carrier({"_meta": {"tracestate": "k=v"}}) == {}


def test_values_that_are_not_strings_or_too_long_are_left_out() -> None:
    assert trace_carrier({"_meta": {"traceparent": 12}}) == {}
    assert trace_carrier({"_meta": {"traceparent": ["a"]}}) == {}
    assert trace_carrier({"_meta": {"traceparent": "0" * 10_000}}) == {}
    state = {"traceparent": PARENT, "tracestate": "k=" + "v" * 10_000}
    assert trace_carrier({"_meta": state}) == {"traceparent": PARENT}


def test_the_error_text_of_an_error_and_of_a_tool_error_is_cut() -> None:
    assert error_text(None) is None
    assert error_text({"result": {"content": []}}) is None
    assert (
        error_text({"error": {"code": -32602, "message": "bad " * 500}})
        == ("bad " * 50)[:MAX_ERROR]
    )
    tool_error = {"isError": True, "structuredContent": {"error": {"message": "no such app"}}}
    assert error_text({"result": tool_error}) == "no such app"
    assert error_text({"result": {"isError": True}}) == "tool error"
