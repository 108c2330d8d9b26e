"""Acting as a browser and as an OAuth client against the authorization server."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from authlib.integrations.httpx_client import AsyncOAuth2Client

from appdeck.auth import scopes

from .conftest import ISSUER, PASSWORD, REDIRECT, RESOURCE

ALL_SCOPES = scopes.render(set(scopes.ALL))


@dataclass
class ConsentForm:
    action: str = ""
    hidden: dict[str, str] = field(default_factory=dict)
    text_fields: dict[str, str] = field(default_factory=dict)
    tenant_options: list[str] = field(default_factory=list)
    scopes: dict[str, bool] = field(default_factory=dict)  # value -> checked
    buttons: dict[str, str] = field(default_factory=dict)  # value -> label
    texts: list[str] = field(default_factory=list)

    def answer(
        self,
        *,
        username: str = "ada",
        password: str = PASSWORD,
        tenant: str = "acme",
        untick: frozenset[str] = frozenset(),
        decision: str = "allow",
    ) -> list[tuple[str, str]]:
        """What a browser posts when the user fills the form in and presses a button."""
        fields = list(self.hidden.items())
        fields += [("tenant", tenant), ("username", username), ("password", password)]
        fields += [
            ("scope", s) for s, checked in self.scopes.items() if checked and s not in untick
        ]
        fields.append(("decision", decision))
        return fields


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.form = ConsentForm()
        self._button: str | None = None
        self._in_select = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.form.action = a.get("action", "")
        elif tag == "input":
            kind, name, value = a.get("type", "text"), a.get("name", ""), a.get("value", "")
            if kind == "hidden":
                self.form.hidden[name] = value
            elif kind == "checkbox" and name == "scope":
                self.form.scopes[value] = "checked" in a
            elif kind in ("text", "password"):
                self.form.text_fields[name] = value
        elif tag == "select":
            self._in_select = True
        elif tag == "option" and self._in_select:
            self.form.tenant_options.append(a.get("value", ""))
        elif tag == "button":
            self._button = a.get("value", "")
            self.form.buttons[self._button] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._in_select = False
        elif tag == "button":
            self._button = None

    def handle_data(self, data: str) -> None:
        self.form.texts.append(data)
        if self._button is not None:
            self.form.buttons[self._button] += data


def parse_consent(html: str) -> ConsentForm:
    parser = _Parser()
    parser.feed(html)
    parser.close()
    return parser.form


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def query_of(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


async def register(http: httpx.AsyncClient, **metadata: Any) -> dict[str, Any]:
    body = {
        "client_name": "Test Client",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **metadata,
    }
    r = await http.post("/register", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def authorize_url(client_id: str, challenge: str, **params: str) -> str:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st-123",
        "scope": ALL_SCOPES,
        "resource": RESOURCE,
        **params,
    }
    return f"/authorize?{urlencode({k: v for k, v in query.items() if v is not None})}"


async def sign_in(
    http: httpx.AsyncClient, client_id: str, challenge: str, **answer: Any
) -> httpx.Response:
    """GET the consent page and post it back as a browser would; the server's response."""
    page = await http.get(authorize_url(client_id, challenge))
    assert page.status_code == 200, page.text
    return await post_form(http, parse_consent(page.text), **answer)


async def post_form(http: Any, form: ConsentForm, **answer: Any) -> Any:
    """Post the answered form (through Authlib's client too: it holds no token yet)."""
    extra = {"withhold_token": True} if isinstance(http, AsyncOAuth2Client) else {}
    return await http.request(
        "POST",
        form.action,
        content=urlencode(form.answer(**answer)),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        **extra,
    )


async def get_code(http: httpx.AsyncClient, client_id: str, **answer: Any) -> tuple[str, str]:
    """A fresh authorization code and the verifier it was bound to."""
    verifier, challenge = pkce_pair()
    r = await sign_in(http, client_id, challenge, **answer)
    assert r.status_code == 303, r.text
    return query_of(r.headers["location"])["code"], verifier


async def redeem(
    http: httpx.AsyncClient, client_id: str, code: str, verifier: str, **extra: str
) -> httpx.Response:
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "resource": RESOURCE,
        **extra,
    }
    return await http.post("/token", data=data)


__all__ = ["ISSUER"]
