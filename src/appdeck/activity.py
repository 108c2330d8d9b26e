"""The activity lines of the server log: one INFO line per sign-in, token issued or revoked and
tool call, all of one shape, so an operator can follow what happens without the audit table.

Each line is ``<event> key=value key=value …`` on the ``appdeck.activity`` logger, e.g.::

    tool call tool=deploy_app action=- app=3 outcome=ok ms=41.2 tenant=acme user=u_1f…

The same fields go with the record as ``record.activity`` (a dict), which the JSON log format
(:mod:`appdeck.logs`) turns into keys of its own.

- **Never a secret, never what a client sent as data**: names, ids, outcomes and durations
  only; no token, password, code or argument value is ever a parameter here.
- **Safe to print.** A value a client chose (a tool name, a reason) is shown bare only when it
  is plain (letters, digits, ``_.:@/-``); anything else is JSON-quoted, so a newline or a
  quote cannot forge a line or a field. Every value is cut at :data:`MAX_VALUE` characters.
- **Free when off.** Below INFO (``--log-level warning``) nothing is formatted.
- **Traced.** With tracing on (``docs/observability.md``), a line written inside a span ends
  with ``trace_id=<32 hex> span_id=<16 hex>``: the span the work belongs to (for a tool call,
  the request's span) is found in the trace backend from the log line.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Final

log = logging.getLogger("appdeck.activity")

MAX_VALUE: Final = 80
_PLAIN: Final = re.compile(r"[A-Za-z0-9_.:@/+-]{1,80}")

Value = str | int | float | bool | None
TraceIds = Callable[[], tuple[str, str] | None]
"""The current span's trace id and span id in hex, or None outside any span."""

_trace_ids: TraceIds | None = None


def follow_traces(ids: TraceIds | None) -> None:
    """Give every line the current span's ids, read by ``ids`` (tracing on); None: no ids
    (tracing off, the default: nothing is looked up)."""
    global _trace_ids
    _trace_ids = ids


def sign_in(
    *, tenant: str | None, user: str | None, ok: bool, client: str | None, reason: str = ""
) -> None:
    """A sign-in on the authorization server's page: ``user`` is the name typed (no password,
    never); ``reason`` a short code for a refusal (``bad_password``, ``locked``, …)."""
    _line(
        "sign-in",
        outcome="ok" if ok else "denied",
        tenant=tenant,
        user=user,
        client=client,
        reason=reason or None,
    )


def token_issued(
    *, kind: str, tenant: str | None, user: str | None, client: str | None, token_id: str | None
) -> None:
    """A token handed out: ``kind`` is ``oauth`` (grant type after a colon, e.g.
    ``oauth:authorization_code``) or ``pat``; ``token_id`` its ``jti`` or PAT id (not secret)."""
    _line("token issued", kind=kind, tenant=tenant, user=user, client=client, id=token_id)


def token_revoked(
    *, kind: str, tenant: str | None, user: str | None, client: str | None, token_id: str | None
) -> None:
    """A token revoked (``/revoke``, ``appdeck token revoke``, a refresh family)."""
    _line("token revoked", kind=kind, tenant=tenant, user=user, client=client, id=token_id)


def tool_call(
    *,
    tool: str | None,
    action: str | None,
    app_id: int | None,
    failed: bool,
    ms: float,
    tenant: str | None,
    user: str | None,
) -> None:
    """One ``tools/call``, once its answer is known (never its arguments)."""
    if not log.isEnabledFor(logging.INFO):  # on every call: return before building anything
        return
    # the fields of _line, written out: one of these goes with every tools/call, so it skips
    # the keyword dict and the generic value checks (the values' types are known here)
    tool = _cut(tool)
    action = _cut(action)
    tenant = _cut(tenant)
    user = _cut(user)
    outcome = "error" if failed else "ok"
    ms = round(ms, 1)
    fields: dict[str, Value] = {
        "activity": "tool call",
        "tool": tool,
        "action": action,
        "app": app_id,
        "outcome": outcome,
        "ms": ms,
        "tenant": tenant,
        "user": user,
    }
    text = (
        f"tool={_text(tool)} action={_text(action)} app={'-' if app_id is None else app_id} "
        f"outcome={outcome} ms={ms} tenant={_text(tenant)} user={_text(user)}"
    )
    _emit("tool call", fields, text)


def _line(event: str, **fields: Value) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    bounded = {k: v[:MAX_VALUE] if isinstance(v, str) else v for k, v in fields.items()}
    text = " ".join(f"{key}={_shown(value)}" for key, value in bounded.items())
    _emit(event, {"activity": event, **bounded}, text)


def _emit(event: str, fields: dict[str, Value], text: str) -> None:
    """Log the line: ``fields`` (the record's ``activity``, its ``activity`` key first) is
    the line's own dict, given the trace's ids too when there is a span."""
    ids = _trace_ids() if _trace_ids is not None else None
    if ids is not None:
        fields["trace_id"], fields["span_id"] = ids
        text = f"{text} trace_id={ids[0]} span_id={ids[1]}"
    log.info("%s %s", event, text, extra={"activity": fields})


def _shown(value: Value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return _text(value)


def _cut(value: str | None) -> str | None:
    return value if value is None or len(value) <= MAX_VALUE else value[:MAX_VALUE]


_SHOWN: dict[str, str] = {}
"""Strings already shown (a tool's, a tenant's, a user's name: the same few on every line)."""
_SHOWN_MAX: Final = 4096


def _text(value: str | None) -> str:
    if value is None:
        return "-"
    shown = _SHOWN.get(value)
    if shown is None:
        shown = value if _PLAIN.fullmatch(value) else json.dumps(value)
        if len(_SHOWN) >= _SHOWN_MAX:  # a client can send any tool name: never a growing map
            _SHOWN.clear()
        _SHOWN[value] = shown
    return shown
