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
    _line(
        "tool call",
        tool=tool,
        action=action,
        app=app_id,
        outcome="error" if failed else "ok",
        ms=round(ms, 1),
        tenant=tenant,
        user=user,
    )


def _line(event: str, **fields: Value) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    bounded = {k: v[:MAX_VALUE] if isinstance(v, str) else v for k, v in fields.items()}
    ids = _trace_ids() if _trace_ids is not None else None
    if ids is not None:
        bounded["trace_id"], bounded["span_id"] = ids
    text = " ".join(f"{key}={_shown(value)}" for key, value in bounded.items())
    log.info("%s %s", event, text, extra={"activity": {"activity": event, **bounded}})


def _shown(value: Value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value if _PLAIN.fullmatch(value) else json.dumps(value)
