"""Listening on both loopbacks: the same port on 127.0.0.1 and [::1], so nothing else can sit
on the other one; a port taken there is one clear error; a host without IPv6 still starts."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable, Iterator

import pytest

from appdeck.common import listen as listen_module
from appdeck.common.listen import ListenError, listen


@pytest.fixture
def opened() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for sock in socks:
        sock.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def test_a_loopback_host_listens_on_both_loopbacks_on_one_picked_port(
    opened: list[socket.socket],
) -> None:
    for host in ("127.0.0.1", "localhost"):
        socks = listen(host, 0)
        opened.extend(socks)
        assert [s.getsockname()[0] for s in socks] == ["127.0.0.1", "::1"]
        assert len({s.getsockname()[1] for s in socks}) == 1
        port = socks[0].getsockname()[1]
        for other in ("127.0.0.1", "::1"):
            with pytest.raises(OSError, match="in use"):
                _bind(other, port).close()


def test_another_host_gets_one_socket(opened: list[socket.socket]) -> None:
    opened.extend(socks := listen("0.0.0.0", 0))
    assert len(socks) == 1


def test_a_fixed_port_taken_on_the_ipv6_loopback_is_one_clear_error(
    opened: list[socket.socket],
) -> None:
    squatter = _bind("::1", 0)
    opened.append(squatter)
    squatter.listen(1)
    port = squatter.getsockname()[1]
    with pytest.raises(ListenError) as refused:
        opened.extend(listen("127.0.0.1", port))
    assert str(refused.value) == f"port {port} is already in use on [::1]"
    # nothing was left bound on 127.0.0.1
    _bind("127.0.0.1", port).close()


def _failing(monkeypatch: pytest.MonkeyPatch, code: int, times: int) -> Callable[[], int]:
    """Make binding [::1] fail with ``code`` the first ``times`` times."""
    real = listen_module._open
    failures = {"left": times}

    def open_(host: str, port: int, backlog: int) -> socket.socket:
        if host == "::1" and failures["left"] > 0:
            failures["left"] -= 1
            raise OSError(code, "simulated")
        return real(host, port, backlog)

    monkeypatch.setattr(listen_module, "_open", open_)
    return lambda: times - failures["left"]


def test_a_picked_port_taken_on_the_ipv6_loopback_is_picked_again(
    monkeypatch: pytest.MonkeyPatch, opened: list[socket.socket]
) -> None:
    failed = _failing(monkeypatch, errno.EADDRINUSE, 2)
    opened.extend(socks := listen("127.0.0.1", 0))
    assert failed() == 2
    assert [s.getsockname()[0] for s in socks] == ["127.0.0.1", "::1"]


def test_a_host_without_ipv6_listens_on_127_0_0_1_only_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
    opened: list[socket.socket],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _failing(monkeypatch, errno.EADDRNOTAVAIL, 1)
    opened.extend(socks := listen("127.0.0.1", 0))
    assert [s.getsockname()[0] for s in socks] == ["127.0.0.1"]
    assert "no IPv6 loopback" in caplog.text
