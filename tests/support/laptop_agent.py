"""An agent on the "laptop" (tests/support/laptop.py): run inside its network namespace, it
signs in to an AppDeck server with OAuth through the official MCP client and calls tools.

    ip netns exec laptop-ab12 .venv/bin/python -m tests.support.laptop_agent PLAN.json

``PLAN.json``: ``{"url": "https://appdeck.example.test/mcp", "cafile": "root.pem",
"tenant": "dev", "username": "dev", "password": "...", "calls": [["tool", {args}], ...]}``.
TLS is verified against ``cafile`` only. The SDK's OAuth client (``OAuthClientProvider``)
registers itself, and its redirect handler acts as the person at the sign-in page: it GETs the
authorization URL, fills the form in (tenant, user, password, every scope offered) and posts
it, and hands the code the server redirects with to the SDK, which redeems it. Prints one JSON
object: ``{"access_token": ..., "results": [structured content or {"error": text}, ...]}``.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tests.auth.server.helpers import parse_consent

CALLBACK = "http://127.0.0.1:45999/callback"
"""Never connected to: the redirect to it is read from the sign-in form's answer."""
LIMIT_S = 240.0


class MemoryStorage:
    """The SDK's token storage, in memory (the browser OAuth test uses it too)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Person:
    """Answers the sign-in page as a person would (without a browser) and catches the code."""

    def __init__(self, plan: dict[str, Any], tls: ssl.SSLContext) -> None:
        self.plan = plan
        self.tls = tls
        self.location = ""

    async def authorize(self, url: str) -> None:
        async with httpx2.AsyncClient(verify=self.tls, timeout=15) as browser:
            page = await browser.get(url)
            page.raise_for_status()
            form = parse_consent(page.text)
            answer = form.answer(
                username=self.plan["username"],
                password=self.plan["password"],
                tenant=self.plan["tenant"],
            )
            posted = await browser.post(
                urljoin(str(page.url), form.action),
                content=urlencode(answer),
                headers={"content-type": "application/x-www-form-urlencoded"},
            )
            if posted.status_code != 303:
                raise RuntimeError(f"sign-in answered {posted.status_code}: {posted.text[:300]}")
            self.location = posted.headers["location"]

    async def callback(self) -> AuthorizationCodeResult:
        query = {k: v[0] for k, v in parse_qs(urlsplit(self.location).query).items()}
        if "code" not in query:
            raise RuntimeError(f"no code in the redirect: {query}")
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )


def _filled(arguments: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """``"$app_id"`` in a call's arguments: the app id the first call's result named."""
    return {k: (results[0]["app_id"] if v == "$app_id" else v) for k, v in arguments.items()}


async def main(plan: dict[str, Any]) -> dict[str, Any]:
    tls = ssl.create_default_context(cafile=plan["cafile"])
    person = Person(plan, tls)
    storage = MemoryStorage()
    auth = OAuthClientProvider(
        server_url=plan["url"],
        client_metadata=OAuthClientMetadata(
            client_name="laptop agent",
            redirect_uris=[CALLBACK],  # type: ignore[list-item]  # pydantic converts it
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=person.authorize,
        callback_handler=person.callback,
    )
    results: list[Any] = []
    async with asyncio.timeout(LIMIT_S):
        async with httpx2.AsyncClient(
            auth=auth, verify=tls, timeout=httpx2.Timeout(15, read=120)
        ) as http:
            transport = streamable_http_client(plan["url"], http_client=http)
            async with Client(transport, mode="legacy") as client:
                for name, arguments in plan["calls"]:
                    arguments = _filled(arguments, results)
                    result = await client.call_tool(name, arguments)
                    if result.is_error:
                        results.append({"error": str(result.content)[:2000]})
                    else:
                        results.append(result.structured_content)
    token = storage.tokens.access_token if storage.tokens else None
    return {"access_token": token, "results": results}


if __name__ == "__main__":
    done = asyncio.run(main(json.loads(Path(sys.argv[1]).read_text())))
    print(json.dumps(done))
