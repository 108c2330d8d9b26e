"""The activity lines: one INFO line of one shape per event, nothing a client sent as data,
nothing a newline could forge, nothing built below INFO."""

from __future__ import annotations

import logging

import pytest

from appdeck import activity


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "appdeck.activity"]


def test_a_tool_call_is_one_info_line_with_tool_action_app_outcome_and_ms(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    activity.tool_call(
        tool="deploy_app", action=None, app_id=3, failed=False, ms=41.25, tenant="acme", user="u1"
    )
    assert _lines(caplog) == [
        "tool call tool=deploy_app action=- app=3 outcome=ok ms=41.2 tenant=acme user=u1"
    ]
    assert caplog.records[0].levelno == logging.INFO
    assert caplog.records[0].activity["app"] == 3  # type: ignore[attr-defined]


def test_sign_in_and_token_lines_have_the_same_shape(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    activity.sign_in(tenant="acme", user="ada", ok=False, client="c1", reason="bad_password")
    activity.token_issued(
        kind="oauth:authorization_code", tenant="acme", user="u1", client="c1", token_id="j1"
    )
    activity.token_revoked(kind="pat", tenant="acme", user="u1", client=None, token_id="p1")
    assert _lines(caplog) == [
        "sign-in outcome=denied tenant=acme user=ada client=c1 reason=bad_password",
        "token issued kind=oauth:authorization_code tenant=acme user=u1 client=c1 id=j1",
        "token revoked kind=pat tenant=acme user=u1 client=- id=p1",
    ]


def test_a_value_a_client_chose_cannot_forge_a_line_or_a_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    activity.tool_call(
        tool="x\n2026 [info] tool call outcome=ok",
        action='a" b=c',
        app_id=None,
        failed=True,
        ms=1.0,
        tenant=None,
        user=None,
    )
    (line,) = _lines(caplog)
    assert "\n" not in line
    assert line.startswith(
        'tool call tool="x\\n2026 [info] tool call outcome=ok" action="a\\" b=c"'
    )
    assert "outcome=error" in line


def test_every_value_is_cut(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    activity.tool_call(
        tool="t" * 10_000, action=None, app_id=None, failed=False, ms=0, tenant=None, user=None
    )
    (record,) = caplog.records
    assert len(record.getMessage()) < 300
    assert record.activity["tool"] == "t" * activity.MAX_VALUE  # type: ignore[attr-defined]


def test_nothing_is_logged_below_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="appdeck.activity")
    activity.tool_call(
        tool="t", action=None, app_id=None, failed=False, ms=0, tenant=None, user=None
    )
    activity.sign_in(tenant="a", user="b", ok=True, client=None)
    assert _lines(caplog) == []


def test_with_tracing_on_a_line_inside_a_span_ends_with_its_trace_and_span_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    spans = iter([("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"), None])
    activity.follow_traces(lambda: next(spans))
    try:
        activity.token_revoked(kind="pat", tenant="acme", user="u1", client=None, token_id="p1")
        activity.token_revoked(kind="pat", tenant="acme", user="u1", client=None, token_id="p2")
    finally:
        activity.follow_traces(None)
    activity.token_revoked(kind="pat", tenant="acme", user="u1", client=None, token_id="p3")
    assert _lines(caplog) == [
        "token revoked kind=pat tenant=acme user=u1 client=- id=p1 "
        "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
        "token revoked kind=pat tenant=acme user=u1 client=- id=p2",  # outside any span
        "token revoked kind=pat tenant=acme user=u1 client=- id=p3",  # tracing off
    ]
    assert caplog.records[0].activity["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"  # type: ignore[attr-defined]


def test_a_tool_call_line_inside_a_span_ends_with_its_trace_and_span_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    activity.follow_traces(lambda: ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"))
    try:
        activity.tool_call(
            tool="echo", action="run", app_id=None, failed=False, ms=0.04, tenant="t", user="u"
        )
    finally:
        activity.follow_traces(None)
    assert _lines(caplog) == [
        "tool call tool=echo action=run app=- outcome=ok ms=0.0 tenant=t user=u "
        "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7"
    ]


def test_names_shown_before_are_remembered_within_a_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client can call a new tool name every time: the map of names already shown (which
    spares the check of a name seen before) never grows past its bound, and never mixes
    two names up."""
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    for i in range(activity._SHOWN_MAX * 2 + 10):
        activity.tool_call(
            tool=f"t{i}\n", action=None, app_id=None, failed=False, ms=0, tenant=None, user=None
        )
        assert len(activity._SHOWN) <= activity._SHOWN_MAX
    lines = _lines(caplog)
    assert lines[0].startswith('tool call tool="t0\\n" action=-')
    assert lines[-1].startswith(f'tool call tool="t{activity._SHOWN_MAX * 2 + 9}\\n" action=-')
