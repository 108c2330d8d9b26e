"""The server's base URL and, on a loopback bind, its other loopback spellings.

A server bound to loopback is one server under three names: ``http://127.0.0.1:8080``,
``http://localhost:8080`` and ``http://[::1]:8080``. An OAuth client checks that the protected
resource metadata names the very URL it was given (RFC 9728 §3.3, RFC 8707), so the discovery
documents, the ``resource_metadata`` URL of a ``WWW-Authenticate`` challenge, the issuer and the
``iss`` of an authorization response follow the spelling of the request's ``Host`` header
when it is one of these, and the canonical base URL otherwise (any other Host, or a server with
a public URL, only ever sees the canonical one: the Host check against DNS rebinding is the
transport's, unchanged).

Tokens keep naming the canonical URL (``iss``, ``aud``), so a token obtained under one spelling
is good under all of them; a ``resource`` parameter may name any spelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True, slots=True)
class PublicUrls:
    base: str
    """The canonical base URL (no trailing slash): what tokens name."""
    by_host: dict[str, str] = field(default_factory=dict)
    """``Host`` header value (lower case, with port) -> the base URL spelled that way."""

    @classmethod
    def build(cls, base: str, *, loopback_aliases: bool = False) -> PublicUrls:
        """With ``loopback_aliases``, and when ``base`` is a plain-HTTP loopback URL, every
        loopback spelling of it (same port) is accepted too."""
        base = base.rstrip("/")
        parts = urlsplit(base)
        host = (parts.hostname or "").lower()
        if not loopback_aliases or parts.scheme != "http" or parts.path or parts.port is None:
            return cls(base)
        if host not in ("127.0.0.1", "localhost", "::1"):
            return cls(base)
        spellings = {
            f"{name}:{parts.port}": f"http://{name}:{parts.port}" for name in LOOPBACK_NAMES
        }
        return cls(base, spellings)

    @property
    def bases(self) -> tuple[str, ...]:
        """Every base URL this server answers as, the canonical one first."""
        return (self.base, *(b for b in self.by_host.values() if b != self.base))

    def base_for(self, host: str | None) -> str:
        """The base URL as the client spelled it in ``Host``, if that is a known spelling."""
        if host is None or not self.by_host:
            return self.base
        return self.by_host.get(host.strip().lower(), self.base)

    def is_resource(self, value: str, path: str = "/mcp") -> bool:
        """Whether ``value`` names ``path`` under one of the bases. Scheme and host compare
        case-insensitively and a trailing slash is ignored (MCP 2025-11-25)."""
        wanted = _canonical(value)
        return wanted is not None and any(wanted == _canonical(b + path) for b in self.bases)

    def localize(self, text: str, host: str | None) -> str:
        """``text`` with the canonical base URL replaced by the one the client used."""
        base = self.base_for(host)
        return text if base == self.base else text.replace(self.base, base)


def _canonical(value: str) -> tuple[str, str, str, str] | None:
    try:
        parts = urlsplit(value)
        netloc = parts.netloc.lower()
    except ValueError:
        return None
    if parts.fragment or not parts.scheme or not netloc:
        return None
    return (parts.scheme.lower(), netloc, parts.path.rstrip("/"), parts.query)
