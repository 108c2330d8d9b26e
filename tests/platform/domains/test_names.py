"""Which hostnames a spec's ``domains`` may list: public DNS names, normalized; never an IP,
localhost, the apps domain's or the control plane's own; a refusal names the reason."""

from __future__ import annotations

import pytest

from appdeck.common.errors import InvalidArgument
from appdeck.platform.domains.names import check, refusal

APPS = "apps.example.com"


def test_names_are_normalized_in_order_without_repeats() -> None:
    names = ["Shop.Example.COM", "www.example.com.", "shop.example.com"]
    assert check(names, apps_domain=APPS) == ["shop.example.com", "www.example.com"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("10.0.0.1", "not a public DNS name"),
        ("[::1]", "not a public DNS name"),
        ("::1", "not a public DNS name"),
        ("shop", "not a public DNS name"),
        ("shop.example.com:443", "not a public DNS name"),
        ("localhost.localdomain.localhost", "localhost is this machine"),
        ("app.localhost", "localhost is this machine"),
        ("shop.example.com\n", "not a public DNS name"),
        ("shop.exa\x00mple.com", "not a public DNS name"),
        (" shop.example.com", "not a public DNS name"),
        ("ßhop.example.com", "not a public DNS name"),
        ("-shop.example.com", "not a public DNS name"),
        ("a" * 64 + ".example.com", "not a public DNS name"),
        (("a" * 60 + ".") * 5 + "com", "not a public DNS name"),
        ("x--acme.apps.example.com", "under the platform's apps domain apps.example.com"),
        ("apps.example.com", "under the platform's apps domain apps.example.com"),
        ("deck.example.com", "the platform's own hostname"),
    ],
)
def test_a_refusal_names_its_reason(name: str, reason: str) -> None:
    assert reason in (refusal(name, apps_domain=APPS, reserved={"deck.example.com"}) or "")
    with pytest.raises(InvalidArgument) as raised:
        check(["ok.example.com", name], apps_domain=APPS, reserved={"deck.example.com"})
    assert "domains/1" in str(raised.value)
    assert reason in str(raised.value)


def test_a_refused_name_is_repeated_bounded_and_printable() -> None:
    with pytest.raises(InvalidArgument) as raised:
        check(["\x1b[31m" + "x" * 5000], apps_domain=None)
    message = str(raised.value)
    assert len(message) < 250
    assert "\x1b" not in message


def test_a_sibling_of_the_apps_domain_is_a_custom_domain() -> None:
    assert refusal("myapps.example.com", apps_domain=APPS) is None
    assert refusal("example.com", apps_domain=APPS) is None
