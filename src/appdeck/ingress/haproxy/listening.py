"""Where HAProxy listens: the addresses it binds (both loopbacks for a loopback host), a
free port for a test plane, and a probe that a port can be bound (one line when it cannot)."""

from __future__ import annotations

import logging
import random
import socket
from pathlib import Path

from appdeck.common.listen import LOOPBACKS, ListenError, listen

log = logging.getLogger("appdeck.ingress.haproxy")


def free_port(host: str, rng: random.Random | None = None) -> int:
    """A port free on ``host`` now, on both loopbacks for a loopback host (for
    ``ingress_port = 0``: tests). Taken outside the kernel's ephemeral range when it can: the
    port stays HAProxy's across restarts, and an ephemeral one freed by a kill -9 can be
    handed to another process's ``bind(0)`` before the watchdog starts HAProxy again."""
    pick = rng or random.Random()  # noqa: S311 - a port, not a secret
    low, high = ephemeral_range()
    ranges = [r for r in ((10_000, low - 1), (high + 1, 65_535)) if r[1] - r[0] > 1000]
    for _ in range(50 if ranges else 0):
        first, last = pick.choice(ranges)
        port = pick.randint(first, last)
        try:
            socks = listen(host, port)
        except (ListenError, OSError):
            continue
        for sock in socks:
            sock.close()
        return port
    socks = listen(host, 0)
    port = int(socks[0].getsockname()[1])
    for sock in socks:
        sock.close()
    return port


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (where ``bind(0)`` picks)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def addresses(host: str, port: int) -> list[str]:
    """Where HAProxy listens: a loopback host on both loopbacks (as the Python ingress,
    :mod:`appdeck.common.listen`: no app can sit on the other one), when the host has both."""
    pair = LOOPBACKS.get(host)
    if pair is None:
        return [_bracket(host)]
    found = [_bracket(pair[0])]
    try:
        with socket.socket(socket.AF_INET6 if ":" in pair[1] else socket.AF_INET) as probe:
            probe.bind((pair[1], 0))
        found.append(_bracket(pair[1]))
    except OSError:
        log.warning("no second loopback (%s) on this host: HAProxy listens on %s only", *pair)
    return found


def probe(host: str, port: int) -> None:
    """:class:`ListenError` (its one line names the address) when HAProxy could not bind."""
    for address in host.split(","):
        for sock in listen(address.strip(), port):
            sock.close()


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
