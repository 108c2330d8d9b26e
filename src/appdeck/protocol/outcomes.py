"""How one answered request is counted: a word of a small, fixed set (a metric label).

    outcome          what the client got
    ───────────────  ──────────────────────────────────────────────────────────────────
    ok               a complete result (for ``tools/call``: not ``isError``)
    tool_error       ``tools/call`` only: a result with ``isError: true`` (the tool failed)
    task             a task was created (handshake ``params.task`` or the tasks extension)
    input_required   the stateless era's input-required result (the client asks again)
    cancelled        the client cancelled the request (``notifications/cancelled``)
    denied           -32003 or HTTP 401/403: not allowed
    limited          -32004 or HTTP 429
    invalid          any other client mistake: bad JSON-RPC, unknown method or tool, bad
                     params, unknown session or resource, header or version mismatch
    failed           the server's fault: -32603 or HTTP 5xx

Pure: a response dict and an HTTP status in, a word out.
"""

from __future__ import annotations

from typing import Any, Final

from appdeck.protocol import errors

OUTCOMES: Final = (
    "ok",
    "tool_error",
    "task",
    "input_required",
    "cancelled",
    "denied",
    "limited",
    "invalid",
    "failed",
)

_DENIED: Final = frozenset({errors.FORBIDDEN})
_LIMITED: Final = frozenset({errors.RATE_LIMITED})
_FAILED: Final = frozenset({errors.INTERNAL_ERROR})


def of(response: dict[str, Any] | None, status: int) -> str:
    """The outcome of a request answered with ``response`` (None: cancelled, nothing sent)."""
    if response is None:
        return "cancelled"
    error = response.get("error")
    if error is not None:
        return _of_error(error, status)
    result = response.get("result")
    if type(result) is not dict:
        return "ok"
    kind = result.get("resultType")
    if kind == "input_required":
        return "input_required"
    if kind == "task" or "task" in result:
        return "task"
    if result.get("isError") is True:
        return "tool_error"
    return "ok"


def _of_error(error: Any, status: int) -> str:
    code = error.get("code") if type(error) is dict else None
    if status in (401, 403) or code in _DENIED:
        return "denied"
    if status == 429 or code in _LIMITED:
        return "limited"
    if status >= 500 or code in _FAILED:
        return "failed"
    return "invalid"
