"""Where git may connect: the sandbox egress rule (:class:`EgressPolicy`: public unicast only,
plus ``APPDECK_EGRESS_ALLOW``), applied to a repository URL's host before every network run.

The host is resolved here (bounded in time) and EVERY address must pass; git is then pinned to
the first checked address (``http.curloptResolve``), so a DNS answer that changes between the
check and curl's own lookup (rebinding) cannot move it. Numeric hosts in any spelling but the
canonical one (``2130706433``, ``0177.0.0.1``, ``0x7f.1``) and a trailing dot are refused:
resolvers and curl may read them differently, so the pin could miss.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import urlsplit

from appdeck.common.errors import InvalidArgument, Unavailable
from appdeck.runtime.egress import Address, EgressPolicy

Resolve = Callable[[str, int], Awaitable[list[Address]]]
RESOLVE_TIMEOUT_S: Final = 5.0
_HINT: Final = (
    "a repository must be on a public address; an operator may allow an internal network "
    "with APPDECK_EGRESS_ALLOW"
)


async def system_resolve(host: str, port: int) -> list[Address]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos]


async def pin(
    url: str,
    policy: EgressPolicy,
    resolve: Resolve = system_resolve,
    timeout_s: float = RESOLVE_TIMEOUT_S,
) -> list[str]:
    """The ``-c`` options that pin git to a checked address of ``url``'s host (an https URL);
    :class:`InvalidArgument` when any address it has is not allowed."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port or 443
    literal = _literal(host)
    if literal is not None:
        _check(host, [literal], port, policy)
        return []  # curl does no lookup for an address: nothing to pin
    try:
        async with asyncio.timeout(timeout_s):
            addresses = await resolve(host, port)
    except TimeoutError:
        raise Unavailable(f"resolving {host!r} took longer than {timeout_s:g} s") from None
    except (OSError, ValueError, UnicodeError):
        raise Unavailable(f"the repository host {host!r} does not resolve") from None
    _check(host, addresses, port, policy)
    first = addresses[0]
    shown = f"[{first}]" if first.version == 6 else str(first)
    return ["-c", f"http.curloptResolve={host}:{port}:{shown}"]


def _literal(host: str) -> Address | None:
    """``host`` as an address if it is one; refused if it looks numeric but is not canonical."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    last = host.rsplit(".", 1)[-1]
    if host.endswith(".") or not host or last.isdigit() or last.startswith("0x"):
        raise InvalidArgument(
            f"the repository host {host[:100]!r} is not a name or a dotted address",
            hint="write an IPv4 address as four decimal numbers, a name without a final dot",
        )
    return None


def _check(host: str, addresses: list[Address], port: int, policy: EgressPolicy) -> None:
    if not addresses:
        raise Unavailable(f"the repository host {host!r} has no address")
    refused = [a for a in addresses if not policy.allows(a, port)]
    if refused:
        raise InvalidArgument(
            f"the repository host {host[:100]!r} is at {refused[0]}, which is not a public "
            "address: git does not connect there",
            hint=_HINT,
        )
