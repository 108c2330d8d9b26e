"""The listening sockets of the control plane and the ingress router.

A loopback host (``127.0.0.1`` or ``localhost``, the defaults, or ``::1``) is served on *both*
loopbacks, ``127.0.0.1`` and ``[::1]``, on the same port. A client that tries ``localhost``
over IPv6 first (browsers, curl) would otherwise reach whatever else bound ``[::1]:<port>``: an
app sitting there would be handed the sign-in page's passwords. Holding both addresses is what
keeps anyone else off them; SO_REUSEPORT is never set, so nobody can share them either.

- The configured address is bound first; with port 0 its port is then bound on the other
  loopback too, and when that number is taken there, the pair is tried again (a few times).
- A host without the other loopback (IPv6 disabled) gets a warning, and the one address.
- A fixed port taken on either address is :class:`ListenError`, whose message is the one line
  to show: ``port 8080 is already in use on [::1]``.
"""

from __future__ import annotations

import errno
import logging
import socket
from typing import Final

log = logging.getLogger("appdeck.listen")

LOOPBACKS: Final[dict[str, tuple[str, str]]] = {
    "127.0.0.1": ("127.0.0.1", "::1"),
    "localhost": ("127.0.0.1", "::1"),
    "::1": ("::1", "127.0.0.1"),
}
"""A loopback host and the two addresses it is served on, the configured one first."""
ATTEMPTS: Final = 5
_NO_FAMILY: Final = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT})
"""What binding an address of a family the host does not have raises."""


class ListenError(Exception):
    """A server cannot listen where it was told to; the message names the address and port."""

    def __init__(self, message: str, *, port: int) -> None:
        super().__init__(message)
        self.port = port


def listen(host: str, port: int, *, backlog: int = 2048) -> list[socket.socket]:
    """Bound, listening sockets for ``host:port`` (two for a loopback host, see above).
    Connections queue from the moment this returns."""
    pair = LOOPBACKS.get(host)
    if pair is None:
        return [_listen(host, port, backlog)]
    first, second = pair
    for attempt in range(ATTEMPTS):
        main = _listen(first, port, backlog)
        chosen = int(main.getsockname()[1])
        try:
            other = _open(second, chosen, backlog)
        except OSError as exc:
            if exc.errno in _NO_FAMILY:
                log.warning(
                    "no %s loopback on this host (%s): listening on %s only",
                    "IPv6" if ":" in second else "IPv4",
                    exc.strerror,
                    _where(first, chosen),
                )
                return [main]
            main.close()
            if exc.errno == errno.EADDRINUSE and port == 0 and attempt + 1 < ATTEMPTS:
                continue
            raise _error(exc, second, chosen) from None
        return [main, other]
    raise AssertionError("unreachable")  # pragma: no cover - the last attempt raises or returns


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    try:
        return _open(host, port, backlog)
    except OSError as exc:
        raise _error(exc, host, port) from None


def _open(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and uvicorn
    # writes headers and body separately (Nagle would hold the body ~40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restarts over TIME_WAIT
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def _error(exc: OSError, host: str, port: int) -> ListenError:
    if exc.errno == errno.EADDRINUSE:
        return ListenError(f"port {port} is already in use on {_where(host)}", port=port)
    reason = exc.strerror or str(exc)
    return ListenError(f"cannot listen on {_where(host, port)}: {reason}", port=port)


def _where(host: str, port: int | None = None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"
