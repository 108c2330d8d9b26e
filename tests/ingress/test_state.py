"""The data plane's shared state: hostnames, ACME challenges, certificates (``ingress/hosts.py``,
``challenges.py``, ``certs.py``, ``watched.py``)."""

from __future__ import annotations

import pytest

from appdeck.ingress.certs import Certificate, Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.ingress.hosts import HostMap, normalize


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("Shop.Example.COM", "shop.example.com"),
        ("shop.example.com:8443", "shop.example.com"),
        ("shop.example.com.", "shop.example.com"),
        ("localhost", None),
        ("shop..example.com", None),
        ("shop.example.com\x00", None),
        ("shop.example.com\nx", None),
        ("[::1]:80", None),
        ("ünïcode.example.com", None),
        ("a" * 64 + ".example.com", None),
        (("a" * 60 + ".") * 5 + "com", None),
    ],
)
def test_a_host_is_normalized_or_refused(host: str, name: str | None) -> None:
    assert normalize(host) == name


def test_a_custom_domain_routes_to_its_app_and_listeners_hear_each_change() -> None:
    hosts = HostMap()
    heard: list[str] = []
    hosts.on_change(heard.append)
    hosts.set("Shop.example.com", "shop--acme")
    hosts.set("shop.example.com", "shop--acme")  # no change: nothing heard
    assert hosts.route_of("SHOP.example.com:443") == "shop--acme"
    hosts.replace({"blog.example.org": "blog--acme"})
    assert hosts.route_of("shop.example.com") is None
    assert heard[0] == "shop.example.com"
    assert sorted(heard[1:]) == ["blog.example.org", "shop.example.com"]  # replace: both changed
    with pytest.raises(ValueError, match="invalid"):
        hosts.set("shop.example.com", "Bad Route")


def test_a_listener_that_fails_does_not_stop_the_others() -> None:
    hosts = HostMap()
    heard: list[str] = []

    def broken(key: str) -> None:
        raise RuntimeError(key)

    hosts.on_change(broken)
    hosts.on_change(heard.append)
    hosts.set("a.example.com", "a--t")
    assert heard == ["a.example.com"]


def test_only_known_well_formed_tokens_get_an_answer() -> None:
    challenges = Challenges()
    challenges.put("tok_en-1", "tok_en-1.thumb")
    assert challenges.answer("/.well-known/acme-challenge/tok_en-1") == "tok_en-1.thumb"
    assert challenges.answer("/.well-known/acme-challenge/other") is None
    assert challenges.answer("/.well-known/acme-challenge/../x") is None
    assert challenges.answer("/tok_en-1") is None
    with pytest.raises(ValueError, match="token"):
        challenges.put("a/b", "a.b")
    with pytest.raises(ValueError, match="key authorization"):
        challenges.put("ab", "a\nb")
    challenges.drop("tok_en-1")
    assert challenges.answer("/.well-known/acme-challenge/tok_en-1") is None


def test_the_exact_certificate_wins_over_a_wildcard() -> None:
    certs = Certificates()
    wild = Certificate(("*.apps.example.com",), b"w", b"k", 1.0)
    exact = Certificate(("a--t.apps.example.com",), b"e", b"k", 1.0)
    certs.put("wildcard", wild)
    certs.put("a-t", exact)
    assert certs.for_host("A--T.apps.example.com") == ("a-t", exact)
    assert certs.for_host("b--t.apps.example.com") == ("wildcard", wild)
    assert certs.for_host("x.b--t.apps.example.com") is None
    assert certs.for_host("example.com") is None
    with pytest.raises(ValueError, match="name"):
        certs.put("../etc", wild)
