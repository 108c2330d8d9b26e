"""Where an app answers: the apps domain's URL first, https once a certificate is live."""

from __future__ import annotations

from typing import Any

from appdeck.ingress.certs import Certificate, Certificates
from appdeck.platform.domains.proof import ServedCertificates
from appdeck.platform.domains.urls import AppUrls


class Live:
    def __init__(self, hosts: dict[str, dict[str, Any]]) -> None:
        self.hosts = hosts

    def status_of(self, host: str) -> dict[str, Any] | None:
        return self.hosts.get(host)


def test_without_an_apps_domain_only_the_local_url() -> None:
    urls = AppUrls(8088)
    assert urls.all("shop", "acme") == ["http://shop--acme.localhost:8088/"]
    assert urls.primary("shop", "acme") == "http://shop--acme.localhost:8088/"


def test_the_public_url_comes_first_on_the_public_port() -> None:
    urls = AppUrls(8088, "apps.example.com")
    assert urls.all("shop", "acme") == [
        "http://shop--acme.apps.example.com:8088/",
        "http://shop--acme.localhost:8088/",
    ]
    assert AppUrls(8088, "apps.example.com", 80).primary("shop", "acme") == (
        "http://shop--acme.apps.example.com/"
    )


def test_https_once_a_certificate_is_live_for_the_host() -> None:
    tls = Live(
        {
            "shop--acme.apps.example.com": {"live": True},
            "blog--acme.apps.example.com": {"live": False, "state": "ordering"},
            "shop.example.com": {"live": True, "port": 8443},
        }
    )
    urls = AppUrls(8088, "apps.example.com", 80, tls)
    assert urls.primary("shop", "acme") == "https://shop--acme.apps.example.com/"
    assert urls.primary("blog", "acme") == "http://blog--acme.apps.example.com/"
    assert urls.of_host("shop.example.com") == "https://shop.example.com:8443/"


def _certificate(hosts: tuple[str, ...], not_after: float) -> Certificate:
    return Certificate(hosts, b"chain", b"key", not_after)


def test_the_served_certificates_make_a_host_https_while_they_are_valid() -> None:
    certificates = Certificates()
    now = [1_000_000.0]
    tls = ServedCertificates(certificates, 443, clock=lambda: now[0])
    urls = AppUrls(8088, "apps.example.com", 80, tls)
    assert urls.primary("shop", "acme") == "http://shop--acme.apps.example.com/"
    certificates.put("wild", _certificate(("*.apps.example.com",), now[0] + 3600))
    assert urls.primary("shop", "acme") == "https://shop--acme.apps.example.com/"
    status = tls.status_of("shop--acme.apps.example.com")
    assert status is not None
    assert status["state"] == "issued"
    now[0] += 7200  # expired: served by nobody's choice, not shown as https
    assert urls.primary("shop", "acme") == "http://shop--acme.apps.example.com/"
    assert tls.status_of("x" * 10_000) is None


def test_a_served_certificate_on_another_https_port_names_it() -> None:
    certificates = Certificates()
    certificates.put("shop", _certificate(("shop.example.com",), 2e9))
    urls = AppUrls(8088, "apps.example.com", 80, ServedCertificates(certificates, 8443, lambda: 0))
    assert urls.of_host("shop.example.com") == "https://shop.example.com:8443/"


def test_behind_a_clusters_gateway_an_app_has_its_gateway_url_only() -> None:
    urls = AppUrls(0, "apps.example.com", 80, local=False)
    assert urls.all("shop", "acme") == ["http://shop--acme.apps.example.com/"]
    assert urls.primary("shop", "acme") == "http://shop--acme.apps.example.com/"
