"""Where HAProxy listens: a test plane's free port."""

from __future__ import annotations

import random

from appdeck.ingress.haproxy.listening import ephemeral_range, free_port


def test_a_free_port_for_a_test_plane_is_taken_outside_the_ephemeral_range() -> None:
    """The watchdog starts HAProxy again on the same port after a kill -9: an ephemeral port
    could meanwhile be handed to another process's bind(0) (seen in CI: "Address already in
    use")."""
    low, high = ephemeral_range()
    ports = [free_port("127.0.0.1", random.Random(seed)) for seed in range(5)]
    assert all(not low <= port <= high for port in ports), (low, high, ports)
