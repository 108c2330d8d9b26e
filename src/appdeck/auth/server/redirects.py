"""Redirect URIs: which may be registered, which match a registered one, and how a response
is appended to one.

Registrable (RFC 8252, OAuth 2.1 §2.3.1, MCP "localhost or HTTPS"):
- ``https://host/…``;
- ``http://`` only on a loopback host (``127.0.0.1``, ``[::1]``, ``localhost``);
- a private-use scheme of a native app (``vscode://…``, ``com.example.app:/cb``), except the
  schemes a browser would run or resolve locally (``javascript:``, ``data:``, ``file:``…).
Never a fragment, user info, wildcard or control character.

Matching is exact string comparison, except that for an ``http`` loopback redirect URI the
port is ignored (RFC 8252 §7.3: native apps listen on an ephemeral port) and an empty path
equals ``/`` (VS Code registers ``http://127.0.0.1:33418`` and redirects to ``…:port/``).
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlencode, urlsplit

MAX_URI_LENGTH: Final = 2000
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "::1", "localhost"})
DENIED_SCHEMES: Final = frozenset(
    {
        "javascript",
        "vbscript",
        "data",
        "file",
        "blob",
        "about",
        "filesystem",
        "view-source",
        "ftp",
        "ws",
        "wss",
        "mailto",
        "tel",
        "sms",
        "chrome",
        "chrome-extension",
        "jar",
        "resource",
    }
)
# each checked with fullmatch (``$`` lets a final newline through)
_SCHEME = re.compile(r"[a-z][a-z0-9+.\-]*")
_BAD_CHARS = re.compile(r"[\x00-\x20\x7f<>\"\\^`{|}]")
_HOST = re.compile(r"(?:[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*\.?|[0-9a-f:.]+)")
_SOURCE = re.compile(r"[a-z][a-z0-9+.\-]*:(?://[A-Za-z0-9.\-_:\[\]]+)?")


class InvalidRedirect(ValueError):
    """The URI may not be registered as a redirect URI (the message says why)."""


def validate(uri: object) -> str:
    """The URI when it may be registered; raises :class:`InvalidRedirect` otherwise."""
    if not isinstance(uri, str) or not uri:
        raise InvalidRedirect("a redirect URI must be a non-empty string")
    if len(uri) > MAX_URI_LENGTH:
        raise InvalidRedirect(f"a redirect URI may have at most {MAX_URI_LENGTH} characters")
    if "#" in uri:
        raise InvalidRedirect(f"{uri!r}: a redirect URI must not have a fragment")
    if _BAD_CHARS.search(uri) or "*" in uri:
        raise InvalidRedirect(f"{uri!r}: spaces, control characters and wildcards are refused")
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise InvalidRedirect(f"{uri!r} is not a valid URI") from None
    scheme = parts.scheme
    if not scheme or not _SCHEME.fullmatch(scheme) or not uri.startswith(scheme + ":"):
        raise InvalidRedirect(f"{uri!r} has no valid (lower-case) scheme")
    if parts.username is not None or parts.password is not None:
        raise InvalidRedirect(f"{uri!r}: a redirect URI must not carry user information")
    if scheme in ("https", "http"):
        if not parts.hostname or not _HOST.fullmatch(parts.hostname):
            raise InvalidRedirect(f"{uri!r} has no valid host")
        if scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
            raise InvalidRedirect(
                f"{uri!r}: http is allowed only on loopback (127.0.0.1, [::1], localhost); "
                "use https"
            )
        if port == 0:
            raise InvalidRedirect(f"{uri!r} has an invalid port")
        return uri
    if scheme in DENIED_SCHEMES:
        raise InvalidRedirect(f"{uri!r}: the {scheme!r} scheme cannot be a redirect URI")
    if len(uri) <= len(scheme) + 1:
        raise InvalidRedirect(f"{uri!r} has nothing after its scheme")
    return uri


def is_loopback_http(uri: str) -> bool:
    try:
        parts = urlsplit(uri)
        return parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS
    except ValueError:
        return False


def _without_port(uri: str) -> tuple[str, str | None, str, str]:
    parts = urlsplit(uri)
    return (parts.scheme, parts.hostname, parts.path or "/", parts.query)


def matches(requested: str, registered: tuple[str, ...] | list[str]) -> bool:
    """Whether ``requested`` is one of the registered redirect URIs (see the module doc)."""
    if requested in registered:
        return True
    if not is_loopback_http(requested) or "#" in requested:
        return False
    try:
        wanted = _without_port(requested)
        return any(is_loopback_http(r) and _without_port(r) == wanted for r in registered)
    except ValueError:
        return False


def with_params(uri: str, params: dict[str, str | None]) -> str:
    """``uri`` with ``params`` added to its query (keeping the query it already has)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    if not query:
        return uri
    return f"{uri}{'&' if '?' in uri else '?'}{query}"


def origin_source(uri: str) -> str:
    """The CSP source expression that allows navigating to ``uri`` (for ``form-action``)."""
    parts = urlsplit(uri)
    source = f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") else ""
    source = source or f"{parts.scheme}:"
    return source if _SOURCE.fullmatch(source) else ""
