"""The HTML of the sign-in + consent page and of the authorization error page.

Self-contained (no scripts, no external assets), every value escaped, and served with a
Content-Security-Policy that allows only its own nonce'd style sheet, forms posting to the
server (and the client's redirect target, which a post's redirect goes to), no framing.
"""

from __future__ import annotations

import secrets
from html import escape
from urllib.parse import urlsplit

from starlette.responses import HTMLResponse

from appdeck.auth.scopes import SCOPES
from appdeck.auth.server import redirects
from appdeck.auth.server.pending import PendingRequest

_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;background:#f4f5f7;
margin:0;color:#1d2330}
main{max-width:30rem;margin:3rem auto;background:#fff;border-radius:10px;padding:2rem;
box-shadow:0 1px 4px rgba(0,0,0,.12)}
h1{font-size:1.3rem;margin:0 0 .8rem}
p.who{margin:.2rem 0 1rem;color:#4a5263}
p.warn{background:#fff6dd;border:1px solid #e8cf7a;padding:.5rem .7rem;border-radius:6px}
p.error{background:#fde8e8;border:1px solid #e59a9a;padding:.5rem .7rem;border-radius:6px}
label{display:block;margin:.6rem 0 .2rem;font-weight:600}
input[type=text],input[type=password],select{width:100%;box-sizing:border-box;padding:.45rem;
border:1px solid #b9bfcc;border-radius:6px;font:inherit}
fieldset{border:1px solid #dde1e8;border-radius:6px;margin:1rem 0;padding:.5rem .8rem}
fieldset label{font-weight:400;display:flex;gap:.5rem;align-items:flex-start}
code{font-size:.85em;background:#eef0f4;padding:0 .25rem;border-radius:3px}
.buttons{display:flex;flex-direction:row-reverse;gap:.6rem;margin-top:1.2rem}
.granted{background:#eef6ee;border:1px solid #9fcf9f;padding:.1rem .8rem;border-radius:6px}
.granted ul{display:flex;flex-wrap:wrap;gap:.3rem;list-style:none;margin:.3rem 0;padding:0}
em{font-style:normal;font-size:.75rem;padding:0 .3rem;border-radius:3px;background:#e3e6ec}
em.new{background:#ffd866;font-weight:700}
label.new{background:#fff8db;border-radius:4px}
button{flex:1;padding:.55rem;border-radius:6px;border:1px solid #b9bfcc;font:inherit;
cursor:pointer;background:#fff}
button.allow{background:#1f5fd6;border-color:#1f5fd6;color:#fff}
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def page_headers(nonce: str, form_targets: list[str]) -> dict[str, str]:
    """The strict headers of every page: no script, only the nonce'd style, no framing."""
    csp = (
        "default-src 'none'; "
        f"style-src 'nonce-{nonce}'; "
        f"form-action 'self' {' '.join(form_targets)}; "
        "frame-ancestors 'none'; base-uri 'none'"
    )
    return {
        "Content-Security-Policy": csp.replace("  ", " "),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def document(title: str, body: str, nonce: str, style: str = "") -> str:
    """A whole page around ``body`` (already escaped) with the shared style (+ ``style``)."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f'<title>{_e(title)}</title><style nonce="{nonce}">{_STYLE}{style}</style></head>'
        f"<body><main>{body}</main></body></html>"
    )


def error_page(message: str, *, status: int = 400) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    body = (
        "<h1>This sign-in request cannot continue</h1>"
        f"<p class=error>{_e(message)}</p>"
        "<p>Go back to the application and start again.</p>"
    )
    return HTMLResponse(
        document("AppDeck sign-in", body, nonce),
        status_code=status,
        headers=page_headers(nonce, []),
    )


def _where(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https"):
        return parts.hostname or uri
    return f"the app that handles {parts.scheme}: links"


def _tenant_field(chosen: str | None) -> str:
    """A text field: anonymous visitors are never shown which tenants exist."""
    return (
        "<label for=tenant>Tenant</label>"
        f'<input type=text id=tenant name=tenant required value="{_e(chosen or "")}" '
        "autocomplete=organization maxlength=200 autocapitalize=none spellcheck=false>"
    )


def _scope_boxes(pending: PendingRequest, ticked: frozenset[str]) -> str:
    """One checkbox per requested scope; on a step-up page, those already granted say so and
    the new ones are highlighted."""
    step_up = bool(pending.granted)
    rows = []
    for s in sorted(pending.scopes, key=lambda s: (s in pending.granted, s)):  # new ones first
        new = step_up and s not in pending.granted
        mark = " <em class=new>new</em>" if new else (" <em>granted</em>" if step_up else "")
        rows.append(
            f"<label{' class=new' if new else ''}><input type=checkbox name=scope "
            f'value="{_e(s)}"{" checked" if s in ticked else ""}>'
            f"<span><code>{_e(s)}</code>{mark} {_e(SCOPES.get(s, ''))}</span></label>"
        )
    return "".join(rows)


def _intro(pending: PendingRequest, name: str) -> tuple[str, str]:
    """The page's heading and, on a step-up page, what was already granted."""
    if not pending.granted:
        return f"Sign in to AppDeck for {name}", ""
    items = "".join(f"<li><code>{_e(s)}</code></li>" for s in sorted(pending.granted))
    new = len(pending.scopes - pending.granted)
    return (
        f"{name} asks for more access",
        f"<div class=granted><p>You already allowed {_e(name)} to:</p><ul>{items}</ul>"
        f"<p>It now asks for {new} more permission{'' if new == 1 else 's'}, marked "
        "<em class=new>new</em> below. Sign in again to allow them.</p></div>",
    )


def consent_page(
    pending: PendingRequest,
    *,
    action: str,
    tenant: str | None = None,
    username: str | None = None,
    checked: frozenset[str] | None = None,
    error: str | None = None,
) -> HTMLResponse:
    """The sign-in + consent form; the step-up page when ``pending.granted`` is not empty.
    Allow is the form's first submit button, so pressing Enter in a field allows."""
    client = pending.client
    nonce = secrets.token_urlsafe(16)
    name = client.name or "An unnamed application"
    app_name = client.metadata.get("app_name") if client.app_id is not None else None
    if app_name is not None:  # an app's own client: its users sign in to that app
        name = f"{name} ({app_name})"
    if client.kind == "cimd":
        who = f"identified by <code>{_e(urlsplit(client.client_id).hostname or '')}</code>"
        warn = ""
    else:
        who = f"client id <code>{_e(client.client_id)}</code>"
        if app_name is not None:
            who += (
                f" of the app <code>{_e(app_name)}</code>, hosted on AppDeck; it gets only what"
                " you allow below, for that app, and nothing of your AppDeck account"
            )
        warn = (
            "<p class=warn>This application registered itself; AppDeck cannot vouch for its "
            "name. Continue only if you started this sign-in.</p>"
            if client.kind == "dcr"
            else ""
        )
    title, granted = _intro(pending, name)
    ticked = pending.scopes if checked is None else checked
    body = (
        f"<h1>{_e(title)}</h1>"
        f"<p class=who>{who}. After you answer you will be sent back to "
        f"<code>{_e(_where(pending.redirect_uri))}</code>.</p>"
        f"{warn}{granted}"
        + (f"<p class=error role=alert>{_e(error)}</p>" if error else "")
        + f'<form method=post action="{_e(action)}">'
        f'<input type=hidden name=pending value="{_e(pending.id)}">'
        f'<input type=hidden name=csrf value="{_e(pending.csrf)}">'
        f"{_tenant_field(tenant)}"
        "<label for=username>Username</label>"
        f"<input type=text id=username name=username required autocomplete=username "
        f'maxlength=200 value="{_e(username or "")}"{"" if username else " autofocus"}>'
        "<label for=password>Password</label>"
        "<input type=password id=password name=password required "
        f"autocomplete=current-password maxlength=1024{' autofocus' if username else ''}>"
        f"<fieldset><legend>{_e(name)} asks to:</legend>"
        f"{_scope_boxes(pending, ticked)}</fieldset>"
        # Allow comes first in the document (Enter submits the first button); the row is
        # laid out reversed, so Deny still shows on the left
        "<div class=buttons><button class=allow type=submit name=decision value=allow>"
        "Allow</button>"
        "<button type=submit name=decision value=deny formnovalidate>Deny</button></div>"
        "</form>"
    )
    targets = [redirects.origin_source(pending.redirect_uri), redirects.origin_source(action)]
    return HTMLResponse(
        document(title, body, nonce),
        status_code=200,
        headers=page_headers(nonce, targets),
    )
