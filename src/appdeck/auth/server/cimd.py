"""Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document, MCP
2025-11-25): a ``client_id`` that is an https URL names a JSON document describing the client.

Fetching a URL a stranger chose is a server-side request forgery risk, so:
- the URL must be ``https`` with a host and a path, no user info, fragment or dot segments;
- the host is resolved first and every address must be public (not loopback, private,
  link-local, multicast, reserved…); the request then goes to the address that was checked
  (the TLS name and ``Host`` stay the host name), so DNS rebinding cannot swap it;
- no proxies from the environment, no redirects, 5 s for the whole exchange, 64 KiB at most;
- ``cimd_allow_loopback`` (tests, local development) also admits loopback and private
  addresses, and ``http`` on loopback hosts.

The document must be a JSON object whose ``client_id`` is exactly the URL, with valid
``redirect_uris``; it may not carry a client secret nor ask for a shared-secret (or any
other) token endpoint authentication: URL clients are public clients (``none``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
import time
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from appdeck.auth import scopes as scope_names
from appdeck.auth.server import redirects
from appdeck.common import outbound_tls
from appdeck.common.failures import http_failure
from appdeck.storage.oauth import ClientRow

TIMEOUT_SECONDS: Final = 5.0
MAX_DOCUMENT_BYTES: Final = 64 * 1024
MAX_URL_LENGTH: Final = 1024
MIN_CACHE_SECONDS: Final = 300.0
MAX_CACHE_SECONDS: Final = 86_400.0
DEFAULT_CACHE_SECONDS: Final = 3600.0
MAX_REDIRECT_URIS: Final = 20
URL_GRANTS: Final = frozenset({"authorization_code", "refresh_token"})
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?\s*(?:,|$)", re.IGNORECASE)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class MetadataError(Exception):
    """The client id URL or its document cannot be used (the message says why)."""


def is_url_client_id(client_id: str) -> bool:
    return client_id.startswith(("https://", "http://"))


def check_url(client_id: str, *, allow_loopback: bool) -> tuple[str, int]:
    """(host, port) of a usable client id URL; raises :class:`MetadataError`."""
    if len(client_id) > MAX_URL_LENGTH:
        raise MetadataError("the client id URL is too long")
    try:
        parts = urlsplit(client_id)
        port = parts.port
    except ValueError:
        raise MetadataError("the client id is not a valid URL") from None
    host = parts.hostname
    if not host or parts.username is not None or parts.password is not None:
        raise MetadataError("the client id URL needs a host and no user information")
    if parts.fragment or "#" in client_id:
        raise MetadataError("the client id URL must not have a fragment")
    if parts.path in ("", "/") or any(seg in (".", "..") for seg in parts.path.split("/")):
        raise MetadataError("the client id URL needs a path without dot segments")
    if parts.scheme == "http":
        if not (allow_loopback and host in redirects.LOOPBACK_HOSTS):
            raise MetadataError("a client id URL must use https")
    elif parts.scheme != "https":
        raise MetadataError("a client id URL must use https")
    return host, port or (443 if parts.scheme == "https" else 80)


def _address_allowed(address: IPAddress, allow_loopback: bool) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_multicast or address.is_unspecified or address.is_link_local:
        return False  # never, not even in development (cloud metadata lives at 169.254/16)
    if address.is_global:
        return True
    return allow_loopback and (address.is_loopback or address.is_private)


async def resolve(host: str, port: int, *, allow_loopback: bool) -> IPAddress:
    """The address to connect to; every address the name resolves to must be allowed."""
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
        except (OSError, TimeoutError):
            infos = []
        addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    # One message for "does not resolve" and "resolves to a private address", naming no
    # address: the error page must not become a probe of internal DNS.
    if not addresses or not all(_address_allowed(a, allow_loopback) for a in addresses):
        raise MetadataError(
            "the client id URL's host does not resolve to a public address; metadata "
            "documents are fetched from public hosts only (non-public addresses are refused)"
        )
    return next((a for a in addresses if a.version == 4), addresses[0])


def cache_seconds(cache_control: str | None) -> float:
    """How long to keep a document: its ``max-age``, bounded to [5 min, 24 h]."""
    value = (cache_control or "").lower()
    if "no-store" in value or "no-cache" in value:
        return MIN_CACHE_SECONDS
    found = _MAX_AGE.search(value)
    seconds = float(found.group(1)) if found else DEFAULT_CACHE_SECONDS
    return min(max(seconds, MIN_CACHE_SECONDS), MAX_CACHE_SECONDS)


async def fetch(client_id: str, *, allow_loopback: bool) -> tuple[dict[str, Any], float]:
    """The parsed document and its cache lifetime in seconds."""
    host, port = check_url(client_id, allow_loopback=allow_loopback)
    address = await resolve(host, port, allow_loopback=allow_loopback)
    parts = urlsplit(client_id)
    literal = f"[{address}]" if address.version == 6 else str(address)
    target = parts._replace(netloc=f"{literal}:{port}").geturl()
    headers = {"Host": parts.netloc, "Accept": "application/json", "Accept-Encoding": "identity"}
    try:
        async with (
            asyncio.timeout(TIMEOUT_SECONDS),
            httpx.AsyncClient(
                timeout=TIMEOUT_SECONDS,
                follow_redirects=False,
                trust_env=False,
                verify=outbound_tls.verified(),  # one context, not one per fetch (~20 ms)
            ) as client,
            client.stream(
                "GET", target, headers=headers, extensions={"sni_hostname": host}
            ) as response,
        ):
            if response.status_code != 200:
                raise MetadataError(
                    f"fetching the client metadata document gave HTTP {response.status_code}"
                )
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise MetadataError("the client metadata document is larger than 64 KiB")
            encoding = response.headers.get("content-encoding", "identity").lower()
            cache_control = response.headers.get("cache-control")
    except TimeoutError:
        raise MetadataError("fetching the client metadata document timed out") from None
    except httpx.HTTPError as exc:
        raise MetadataError(
            f"the client metadata document could not be fetched: {http_failure(exc)}"
        ) from None
    if encoding not in ("identity", ""):
        raise MetadataError("the client metadata document must not be content-encoded")
    try:
        document = json.loads(bytes(body))
    except (UnicodeDecodeError, ValueError):
        raise MetadataError("the client metadata document is not valid JSON") from None
    if not isinstance(document, dict):
        raise MetadataError("the client metadata document must be a JSON object")
    return document, cache_seconds(cache_control)


def to_client(client_id: str, document: dict[str, Any], ttl: float) -> ClientRow:
    """Validate a fetched document and turn it into a cacheable ``cimd`` client row."""
    if document.get("client_id") != client_id:
        raise MetadataError("the document's client_id is not exactly its URL")
    if "client_secret" in document or "client_secret_expires_at" in document:
        raise MetadataError("a client metadata document must not contain a client secret")
    method = document.get("token_endpoint_auth_method", "none")
    if method != "none":
        raise MetadataError(
            "URL client ids are public clients: token_endpoint_auth_method must be 'none'"
        )
    uris = document.get("redirect_uris")
    if not isinstance(uris, list) or not uris or len(uris) > MAX_REDIRECT_URIS:
        raise MetadataError(f"redirect_uris must be a list of 1 to {MAX_REDIRECT_URIS} URIs")
    try:
        valid = tuple(redirects.validate(u) for u in uris)
    except redirects.InvalidRedirect as exc:
        raise MetadataError(str(exc)) from None
    grants = document.get("grant_types", sorted(URL_GRANTS))
    if not isinstance(grants, list) or not set(grants) <= URL_GRANTS:
        raise MetadataError("grant_types may hold authorization_code and refresh_token only")
    responses = document.get("response_types", ["code"])
    if not isinstance(responses, list) or not set(responses) <= {"code"}:
        raise MetadataError("response_types may hold 'code' only")
    name = document.get("client_name")
    if name is not None and (not isinstance(name, str) or len(name) > 200):
        raise MetadataError("client_name must be a string of at most 200 characters")
    scope = document.get("scope")
    known = scope_names.parse(scope, allow_unknown=True) if isinstance(scope, str) else None
    now = time.time()
    return ClientRow(
        client_id=client_id,
        kind="cimd",
        redirect_uris=valid,
        grant_types=tuple(grants) or ("authorization_code",),
        auth_method="none",
        name=name or None,
        scope=scope_names.render(known) if known else None,
        metadata={
            k: document[k]
            for k in ("client_uri", "software_id", "software_version")
            if isinstance(document.get(k), str) and len(document[k]) <= MAX_URL_LENGTH
        },
        created_at=now,
        expires_at=now + ttl,
    )
