"""The Host and Origin checks name every loopback form a client may send, IPv6 included."""

from __future__ import annotations

from appdeck.transport.security import LOOPBACK_HOSTS, HostPolicy


def test_the_ipv6_loopback_is_one_of_our_hosts_with_or_without_a_port() -> None:
    policy = HostPolicy.build({*LOOPBACK_HOSTS, "127.0.0.1"})
    for host in (b"[::1]:8080", b"[::1]", b"127.0.0.1:8080", b"localhost:8080", b"LOCALHOST"):
        assert policy.host_ok(host), host
    for host in (b"evil.example:8080", b"[::2]:8080", b":", b"[:]:1", None):
        assert not policy.host_ok(host), host
    assert policy.origin_ok(b"http://[::1]:8080")
    assert not policy.origin_ok(b"http://evil.example")


def test_a_bare_ipv6_bind_host_is_kept_whole() -> None:
    assert HostPolicy.build(["::1", "fd00::5", "example.org:443"]).hosts == {
        "::1",
        "fd00::5",
        "example.org",
    }
