"""McpMetrics counts requests and tool calls under bounded labels."""

from __future__ import annotations

from prometheus_client import REGISTRY

from appdeck.observability import mcp


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_method_the_server_does_not_serve_is_counted_as_other() -> None:
    metrics = mcp.McpMetrics(lambda: ["tools/list", "tools/call"], list)
    before = value("appdeck_mcp_requests_total", method="other", era="stateless", outcome="invalid")
    listed = value("appdeck_mcp_requests_total", method="tools/list", era="handshake", outcome="ok")
    for n in range(50):
        metrics.request_served(f"made/up/{n}", "stateless", "invalid")
    metrics.request_served("tools/list", "handshake", "ok")
    after = value("appdeck_mcp_requests_total", method="other", era="stateless", outcome="invalid")
    assert after - before == 50
    assert (
        value("appdeck_mcp_requests_total", method="tools/list", era="handshake", outcome="ok")
        == listed + 1
    )
    assert (
        REGISTRY.get_sample_value(
            "appdeck_mcp_requests_total",
            {"method": "made/up/1", "era": "stateless", "outcome": "invalid"},
        )
        is None
    )


def test_a_tool_is_named_once_registered_and_other_before() -> None:
    tools: list[str] = []
    metrics = mcp.McpMetrics(list, lambda: tools)
    other = value("appdeck_mcp_tool_calls_total", tool="other", outcome="invalid")
    metrics.tool_served("metrics_probe_tool", "invalid", 0.001)
    assert value("appdeck_mcp_tool_calls_total", tool="other", outcome="invalid") == other + 1
    tools.append("metrics_probe_tool")  # registered after the first call
    metrics.tool_served("metrics_probe_tool", "tool_error", 0.003)
    metrics.tool_served("metrics_probe_tool", "ok", 0.2)
    assert value("appdeck_mcp_tool_calls_total", tool="metrics_probe_tool", outcome="ok") == 1
    assert (
        value("appdeck_mcp_tool_calls_total", tool="metrics_probe_tool", outcome="tool_error") == 1
    )
    assert value("appdeck_mcp_tool_call_seconds_count", tool="metrics_probe_tool") == 2
    assert value("appdeck_mcp_tool_call_seconds_bucket", tool="metrics_probe_tool", le="0.005") == 1


def test_an_outcome_or_status_outside_the_set_is_other() -> None:
    metrics = mcp.McpMetrics(lambda: ["ping"], list)
    before = value("appdeck_mcp_requests_total", method="ping", era="handshake", outcome="other")
    metrics.request_served("ping", "handshake", "weird")
    assert (
        value("appdeck_mcp_requests_total", method="ping", era="handshake", outcome="other")
        == before + 1
    )
    updates = value("appdeck_mcp_task_updates_total", status="other")
    metrics.task_changed("exploded")
    assert value("appdeck_mcp_task_updates_total", status="other") == updates + 1


def test_every_refusal_reason_and_stream_kind_exists_at_zero_from_the_start() -> None:
    for reason in mcp.REFUSAL_REASONS:
        assert (
            REGISTRY.get_sample_value("appdeck_mcp_refusals_total", {"reason": reason}) is not None
        )
    for kind in mcp.STREAM_KINDS:
        assert REGISTRY.get_sample_value("appdeck_mcp_streams_open", {"kind": kind}) is not None
