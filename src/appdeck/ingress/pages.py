"""The ingress's own error pages: small HTML pages, or JSON when the client asks for it."""

from __future__ import annotations

import html
from typing import Any

import orjson

_TITLES = {
    400: "Bad request",
    401: "API key required",
    403: "Forbidden",
    404: "No such app",
    413: "Request body too large",
    502: "Bad gateway",
    503: "No live release",
    504: "Gateway timeout",
}
_CODE_TITLES = {"starting": "Starting", "stopped": "Stopped", "not_deployed": "Not deployed yet"}
"""Titles for a code whose status says something else (a 503 while the ingress loads)."""

_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;"
    "color:#222}h1{font-size:1.4em}small{color:#777}"
)


def error_page(
    status: int, code: str, message: str, accept: bytes, **details: Any
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of an ingress error page: HTML, or JSON when the client asks."""
    if b"json" in accept and b"text/html" not in accept:
        body = orjson.dumps(
            {"error": {"status": status, "code": code, "message": message, **details}}
        )
        content_type = b"application/json"
    else:
        title = _CODE_TITLES.get(code) or _TITLES.get(status, "Error")
        body = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{status} {title}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{status} · {title}</h1><p>{html.escape(message)}</p>"
            f"<p><small>AppDeck ingress · {code}</small></p></body></html>\n"
        ).encode()
        content_type = b"text/html; charset=utf-8"
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    return headers, body
