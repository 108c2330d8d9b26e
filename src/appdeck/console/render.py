"""Pages: Jinja2 templates (autoescaped), rendered into responses with the console's headers.

The Content-Security-Policy allows our own script and style sheet only (no inline script or
style, nothing third-party), forms posting to the console only, no framing. Pages are never
cached (``no-store``): they show live, per-user state.

Jinja2 is imported, and its environment made, at the first page a process renders: most
starts of the server (and every CLI command) show none (~0.1 s of CPU saved).
"""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import HTMLResponse

if TYPE_CHECKING:
    import jinja2

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


NAV: Final[list[tuple[str, str]]] = [
    ("/console/account", "Account"),
    ("/console/tenant", "Tenant"),
    ("/console/audit", "Audit log"),
]
"""The top navigation after "Apps": (path, label) of each part of the console."""


MAX_TEXT: Final = 120
"""Characters of an attacker-chosen string (a client's name, a user agent) a cell shows."""


def cap(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as text of at most ``limit`` characters (an ellipsis marks a cut)."""
    shown = "" if value is None else str(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def ago(epoch: float | None, now: float | None = None) -> str:
    """``3 min ago``: how long before now (``-`` when unknown)."""
    if epoch is None:
        return "-"
    seconds = max(0, int((now if now is not None else time.time()) - epoch))
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def when(epoch: float | None) -> str:
    """UTC, to the second: ``2026-11-27 14:41:45 UTC``."""
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(epoch: float | None) -> str:
    if epoch is None:
        return ""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def size(value: int | None) -> str:
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} GiB"


@functools.cache
def _environment() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("appdeck.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ago=ago, when=when, iso=iso, size=size)
    env.globals["cap"] = cap
    return env


def html(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)


def page(request: Request, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
    """A whole page (or, for a ``fragment`` template, a part of one) with the headers."""
    context.setdefault("viewer", None)
    context.setdefault("title", "AppDeck")
    context.setdefault("live", None)
    context.setdefault("nav_links", NAV)
    body = html(template, request_path=request.url.path, **context)
    return HTMLResponse(body, status_code=status, headers=HEADERS)
