"""``GET /``: what this server is and how to connect a client to it.

A browser (``Accept: text/html``) gets a small page under the same strict Content-Security-Policy
as the sign-in page (no script, nothing external); anything else gets a small JSON description.
The MCP URL is spelled as the client reached the server, among the server's own spellings
(:class:`~appdeck.auth.urls.PublicUrls`): a ``Host`` that is not one of them gets the canonical
URL, never an echo of itself.
"""

from __future__ import annotations

import json
import secrets
from html import escape
from typing import Final

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from appdeck.auth.server.consent_page import document, page_headers
from appdeck.auth.urls import PublicUrls

NAME: Final = "appdeck"
_STYLE: Final = (
    "main{max-width:44rem}pre{background:#eef0f4;padding:.6rem .8rem;border-radius:6px;"
    "overflow-x:auto;font-size:.85em;white-space:pre-wrap;word-break:break-all}"
    "h2{font-size:1.05rem;margin:1.3rem 0 .4rem}"
)


def describe(mcp_url: str, version: str, oauth: bool) -> dict[str, object]:
    """The JSON answer: what a program needs to connect."""
    return {
        "name": "AppDeck",
        "description": "A self-hosted app platform driven over MCP (Streamable HTTP).",
        "version": version,
        "mcp_url": mcp_url,
        "transport": "streamable-http",
        "authorization": "oauth2 (browser sign-in) or a bearer token" if oauth else "bearer token",
        "protected_resource_metadata": mcp_url.removesuffix("/mcp")
        + "/.well-known/oauth-protected-resource/mcp",
        "health": mcp_url.removesuffix("/mcp") + "/healthz",
        **({"console": mcp_url.removesuffix("/mcp") + "/console"} if oauth else {}),
    }


def _page(mcp_url: str, version: str, oauth: bool) -> str:
    url = escape(mcp_url, quote=True)
    entry = json.dumps({"mcpServers": {NAME: {"type": "http", "url": mcp_url}}}, indent=2)
    sign_in = (
        "The client opens your browser to sign in (OAuth); or send "
        "<code>Authorization: Bearer &lt;token&gt;</code> with a token from "
        "<code>appdeck token create</code>."
        if oauth
        else "Send <code>Authorization: Bearer &lt;token&gt;</code> with a token from "
        "your identity provider."
    )
    console = (
        '; to see what your agents did, sign in to the <a href="/console">console</a>.'
        if oauth
        else "."
    )
    return (
        "<h1>AppDeck</h1>"
        "<p>This is an AppDeck server: a self-hosted app platform that AI assistants drive "
        f"over the Model Context Protocol (MCP). Connect an MCP client to it{console}</p>"
        f"<h2>MCP URL</h2><pre>{url}</pre><p>{sign_in}</p>"
        f"<h2>Claude Code</h2><pre>claude mcp add --transport http {NAME} {url}</pre>"
        "<h2>Cursor, Claude Code <code>.mcp.json</code>, and others</h2>"
        f"<pre>{escape(entry)}</pre>"
        '<p>VS Code\'s <code>.vscode/mcp.json</code> names the key <code>"servers"</code>.</p>'
        "<h2>MCP Inspector</h2>"
        "<pre>npx @modelcontextprotocol/inspector</pre>"
        f"<p>Then choose Streamable HTTP, URL <code>{url}</code>, and Connect.</p>"
        f"<p class=who>AppDeck {escape(version)} · <code>/healthz</code></p>"
    )


def landing_route(urls: PublicUrls, version: str, *, oauth: bool) -> Route:
    """The ``/`` route: HTML for a browser, JSON for everything else."""

    async def landing(request: Request) -> Response:
        mcp_url = urls.base_for(request.headers.get("host")) + "/mcp"
        if "text/html" in request.headers.get("accept", ""):
            nonce = secrets.token_urlsafe(16)
            body = document("AppDeck", _page(mcp_url, version, oauth), nonce, _STYLE)
            return HTMLResponse(body, headers=page_headers(nonce, []))
        return JSONResponse(
            describe(mcp_url, version, oauth), headers={"Cache-Control": "no-store"}
        )

    return Route("/", landing, methods=["GET"])
