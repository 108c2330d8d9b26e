"""What the core hands its :class:`~appdeck.protocol.ports.Tracing` port of a request: the
W3C trace context a client put in ``params._meta`` (``traceparent``, ``tracestate``), and
the error text of an answer. Pure: dicts in, strings out; the core imports no tracing library.

The carrier holds only those two keys, only as strings, cut to the lengths the W3C format
allows (a ``traceparent`` is 55 characters; a ``tracestate`` at most 32 members of 256): a
client's ``_meta`` is attacker input, and the propagator parses what it is given.
"""

from __future__ import annotations

from typing import Any, Final

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
MAX_TRACEPARENT: Final = 64
MAX_TRACESTATE: Final = 512
MAX_ERROR: Final = 200
"""An error's message given to a span is cut here (it may quote a deployed app's output)."""

_NONE: Final[dict[str, str]] = {}


def trace_carrier(params: Any) -> dict[str, str]:
    """``traceparent`` and ``tracestate`` from ``params._meta``, when they are strings."""
    meta = params.get("_meta") if type(params) is dict else None
    if type(meta) is not dict or TRACEPARENT not in meta:
        return _NONE
    parent = meta[TRACEPARENT]
    if type(parent) is not str or len(parent) > MAX_TRACEPARENT:
        return _NONE
    carrier = {TRACEPARENT: parent}
    state = meta.get(TRACESTATE)
    if type(state) is str and len(state) <= MAX_TRACESTATE:
        carrier[TRACESTATE] = state
    return carrier


def error_text(response: dict[str, Any] | None) -> str | None:
    """The message of a JSON-RPC error, or of a tool result with ``isError`` (its
    ``structuredContent.error.message``), cut to :data:`MAX_ERROR`; None otherwise."""
    if response is None:
        return None
    error = response.get("error")
    if type(error) is not dict:
        result = response.get("result")
        if type(result) is not dict or result.get("isError") is not True:
            return None
        structured = result.get("structuredContent")
        error = structured.get("error") if type(structured) is dict else None
        if type(error) is not dict:
            return "tool error"
    message = error.get("message")
    return message[:MAX_ERROR] if type(message) is str else None
