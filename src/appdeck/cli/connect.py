"""What ``appdeck serve`` prints after its URL: how to connect a client, and how to get a first
user when nobody can sign in yet. Plain text builders (no I/O), the README says the same."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

NAME = "appdeck"
"""The name the snippets give the server in a client's configuration."""
DEFAULT_DATA_DIR = Path(".appdeck")


def connect_block(url: str, token: str | None) -> str:
    """The "Connect a client" block: a ``claude mcp add`` line, an ``mcpServers`` entry and the
    MCP Inspector; with ``token`` (``--dev``) each carries ``Authorization: Bearer <token>``,
    without one the client signs in through the browser (OAuth)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    entry: dict[str, object] = {"type": "http", "url": url}
    if headers:
        entry["headers"] = headers
    claude = f"claude mcp add --transport http {NAME} {url}"
    if token:
        claude += f' --header "Authorization: Bearer {token}"'
        auth = "the dev token is in each line"
        inspector = (
            f"Transport Streamable HTTP, URL {url}, Authentication: header Authorization, "
            "value Bearer <the dev token>"
        )
    else:
        auth = "it signs in through your browser, or send the header "
        auth += "Authorization: Bearer <a token from `appdeck token create`>"
        inspector = f"Transport Streamable HTTP, URL {url}, Connect"
    mcp_servers = json.dumps({"mcpServers": {NAME: entry}})
    return "\n".join(
        [
            f"Connect a client; {auth}:",
            f"  Claude Code:     {claude}",
            "  mcpServers JSON (Claude Code .mcp.json, Cursor ~/.cursor/mcp.json; VS Code's "
            '.vscode/mcp.json names the key "servers"):',
            f"    {mcp_servers}",
            f"  MCP Inspector:   npx @modelcontextprotocol/inspector   then {inspector}",
        ]
    )


def first_user_hint(data_dir: Path) -> str:
    """Two lines for a data directory where nobody can sign in yet (no user with a password)."""
    where = "" if data_dir == DEFAULT_DATA_DIR else f" --data-dir {shlex.quote(str(data_dir))}"
    return (
        "Nobody can sign in yet. Create a tenant and an admin user (password read from stdin):\n"
        f"  appdeck tenant create acme{where} && "
        f"appdeck user create --tenant acme --name alice --role admin --password-stdin{where}\n"
        "  (or restart with --dev for a 'dev' tenant, user and token)"
    )
