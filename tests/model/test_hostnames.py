"""The hostname rule: ``<app>--<tenant>.localhost``, one app per hostname platform-wide."""

from __future__ import annotations

import itertools

import pytest

from appdeck.model import hostnames
from appdeck.platform.apps import APP_NAME


def test_the_hostname_carries_the_tenant() -> None:
    assert hostnames.route_label("hello", "acme") == "hello--acme"
    assert hostnames.hostname("hello", "acme") == "hello--acme.localhost"
    assert hostnames.hostname("hello", "acme", "apps.example.test") == (
        "hello--acme.apps.example.test"
    )
    assert hostnames.url("hello", "acme", 8088) == "http://hello--acme.localhost:8088/"


def test_two_tenants_apps_of_one_name_get_different_hostnames() -> None:
    assert hostnames.route_label("hello", "acme") != hostnames.route_label("hello", "globex")


@pytest.mark.parametrize(
    ("app", "tenant"),
    [("hello", "acme"), ("my--app", "acme"), ("a", "b-c"), ("a-b", "c"), ("x--y--z", "t1")],
)
def test_a_label_parses_back_to_its_app_and_tenant(app: str, tenant: str) -> None:
    assert hostnames.parse_label(hostnames.route_label(app, tenant)) == (app, tenant)


def test_no_two_apps_share_a_label() -> None:
    names = ["a", "a-b", "a--b", "b", "b-c", "b--c", "c", "a--b--c", "ab"]
    apps = [n for n in names if APP_NAME.match(n)]
    tenants = [n for n in names if hostnames.routable_tenant(n)]
    labels = [hostnames.route_label(a, t) for a, t in itertools.product(apps, tenants)]
    assert len(labels) == len(set(labels))


@pytest.mark.parametrize("tenant", ["b--c", "acme-", "-acme", "", "x" * 61, "Acme"])
def test_a_tenant_id_that_would_make_labels_ambiguous_or_too_long_is_not_routable(
    tenant: str,
) -> None:
    assert not hostnames.routable_tenant(tenant)
    assert hostnames.unroutable_reason("hello", tenant) is not None


@pytest.mark.parametrize("label", ["hello", "hello--", "--acme", "hello--b--", "hello---acme"])
def test_a_label_without_an_app_and_a_routable_tenant_parses_to_nothing(label: str) -> None:
    assert hostnames.parse_label(label) is None


def test_an_app_name_is_limited_by_its_tenant_to_fit_a_dns_label() -> None:
    tenant = "t" * 30
    assert hostnames.max_app_name_length(tenant) == 31
    assert hostnames.unroutable_reason("a" * 31, tenant) is None
    reason = hostnames.unroutable_reason("a" * 32, tenant)
    assert reason is not None
    assert "at most 31" in reason
    assert len(hostnames.route_label("a" * 31, tenant)) == hostnames.MAX_LABEL
