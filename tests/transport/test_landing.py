"""GET / tells a browser what this server is and how to connect, and a program the same in
JSON; the MCP URL is spelled as the client reached the server, among the server's own names."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urlsplit

import httpx

from appdeck.app import Services


def _http(services: Services, host: str) -> httpx.AsyncClient:
    port = urlsplit(services.base_url).port
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=services.asgi()), base_url=f"http://{host}:{port}"
    )


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)


async def test_a_browser_gets_a_page_with_the_mcp_url_and_the_ways_to_connect(
    services: Services,
) -> None:
    async with _http(services, "localhost") as http:
        r = await http.get("/", headers={"accept": "text/html,application/xhtml+xml"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    url = f"http://localhost:{urlsplit(services.base_url).port}/mcp"
    assert f"<pre>{url}</pre>" in r.text
    assert f"claude mcp add --transport http appdeck {url}" in r.text
    assert "&quot;mcpServers&quot;" in r.text
    assert "npx @modelcontextprotocol/inspector" in r.text
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src" not in csp
    assert r.headers["x-frame-options"] == "DENY"
    tags = _Tags()
    tags.feed(r.text)
    assert not tags.tags & {"script", "img", "iframe", "link"}
    assert r.text.count("<a ") == 1
    assert '<a href="/console">console</a>' in r.text  # the only link: the people's console


async def test_a_program_gets_a_small_json_description(services: Services) -> None:
    async with _http(services, "[::1]") as http:
        r = await http.get("/", headers={"accept": "application/json"})
        plain = await http.get("/")
    port = urlsplit(services.base_url).port
    assert r.json() == plain.json()
    body = r.json()
    assert body["mcp_url"] == f"http://[::1]:{port}/mcp"
    assert body["transport"] == "streamable-http"
    assert body["version"] == services.settings.app_version
    assert body["protected_resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")
    assert body["console"] == f"http://[::1]:{port}/console"


async def test_a_foreign_host_is_never_echoed_back(services: Services) -> None:
    async with _http(services, "evil.example") as http:
        page = await http.get("/", headers={"accept": "text/html"})
        body = (await http.get("/")).json()
    assert "evil.example" not in page.text
    assert body["mcp_url"] == f"{services.base_url}/mcp"
