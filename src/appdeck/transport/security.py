"""DNS-rebinding defence: the Host and Origin headers must name this server."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def _host_only(value: str) -> str:
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8080
        end = value.find("]")
        return value[1:end] if end > 0 else value
    if value.count(":") > 1:  # a bare IPv6 address (::1), never host:port
        return value
    host, _, port = value.rpartition(":")
    return host if host and port.isdigit() else value


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Which Host and Origin values are ours. Empty ``hosts`` turns the Host check off."""

    hosts: frozenset[str]
    origins: frozenset[str] = frozenset()
    _seen: dict[bytes, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, hosts: Iterable[str], origins: Iterable[str] = ()) -> HostPolicy:
        names = {_host_only(h) for h in hosts if h and h not in ("0.0.0.0", "::")}
        return cls(frozenset(names), frozenset(o.rstrip("/").lower() for o in origins))

    def host_ok(self, host: bytes | None) -> bool:
        if not self.hosts:
            return True
        if host is None:
            return False
        known = self._seen.get(host)
        if known is None:
            known = _host_only(host.decode("latin-1")) in self.hosts
            if len(self._seen) < 256:  # clients send the same few Host values
                self._seen[host] = known
        return known

    def origin_ok(self, origin: bytes | None) -> bool:
        """No Origin header (non-browser clients) is allowed, as the SDKs do."""
        if origin is None:
            return True
        text = origin.decode("latin-1").rstrip("/").lower()
        if text in self.origins:
            return True
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        return parts.hostname in (self.hosts or LOOPBACK_HOSTS)
