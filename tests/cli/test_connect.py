"""The "connect a client" block and the first-user hint that `appdeck serve` prints."""

from __future__ import annotations

import json
from pathlib import Path

from appdeck.cli.connect import connect_block, first_user_hint

URL = "http://127.0.0.1:8080/mcp"


def _mcp_servers(block: str) -> dict[str, object]:
    (line,) = [ln for ln in block.splitlines() if ln.strip().startswith('{"mcpServers"')]
    parsed: dict[str, object] = json.loads(line)
    return parsed


def test_with_a_dev_token_every_snippet_carries_it() -> None:
    block = connect_block(URL, "tok.en.value")
    assert (
        f'claude mcp add --transport http appdeck {URL} --header "Authorization: Bearer tok.en.value"'
        in block
    )
    assert _mcp_servers(block) == {
        "mcpServers": {
            "appdeck": {
                "type": "http",
                "url": URL,
                "headers": {"Authorization": "Bearer tok.en.value"},
            }
        }
    }
    assert "npx @modelcontextprotocol/inspector" in block
    assert ".vscode/mcp.json" in block


def test_without_a_token_the_client_signs_in_and_no_header_is_shown() -> None:
    block = connect_block(URL, None)
    assert f"claude mcp add --transport http appdeck {URL}\n" in block + "\n"
    assert "--header" not in block.split("Claude Code:")[1].splitlines()[0]
    assert _mcp_servers(block) == {"mcpServers": {"appdeck": {"type": "http", "url": URL}}}
    assert "signs in through your browser" in block
    assert "appdeck token create" in block


def test_the_first_user_hint_names_the_commands_and_the_data_dir() -> None:
    default = first_user_hint(Path(".appdeck"))
    assert "appdeck tenant create acme &&" in default
    assert "appdeck user create --tenant acme --name alice --role admin --password-stdin" in default
    assert "--dev" in default
    assert "--data-dir" not in default
    elsewhere = first_user_hint(Path("/srv/my data"))
    assert "--data-dir '/srv/my data'" in elsewhere
    assert len(default.splitlines()) <= 3
