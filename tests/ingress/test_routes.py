from __future__ import annotations

import random
from collections import Counter

import pytest

from appdeck.ingress import Backend, Counters, RouteTable
from appdeck.ingress.hosts import HostMap

A = "127.0.0.1:9001"
B = "127.0.0.1:9002"
C = "127.0.0.1:9003"


@pytest.mark.parametrize(
    "host",
    [
        b"blog.localhost",
        b"BLOG.LocalHost",
        b"blog.localhost:8088",
        b"blog.localhost.",
        b"blog.localhost.:80",
    ],
)
def test_a_host_names_its_route_whatever_the_case_and_port(host: bytes) -> None:
    routes = RouteTable()
    assert routes.route_of(host) == "blog"


@pytest.mark.parametrize(
    "host",
    [
        b"",
        b"localhost",
        b"localhost:8088",
        b".localhost",
        b"a.b.localhost",
        b"blog.example.com",
        b"blog.localhost:http",
        b"[::1]:8088",
        b"127.0.0.1:8088",
        b"blog_x.localhost",
        b"x" * 64 + b".localhost",
        b"blog.localhostx",
    ],
)
def test_only_a_label_under_a_base_domain_names_a_route(host: bytes) -> None:
    assert RouteTable().route_of(host) is None


def test_extra_base_domains_name_routes_too() -> None:
    routes = RouteTable(extra_domains=["Apps.Example.Test", "dev.internal."])
    assert routes.domains == ("localhost", "apps.example.test", "dev.internal")
    assert routes.route_of(b"blog.apps.example.test:443") == "blog"
    assert routes.route_of(b"blog.dev.internal") == "blog"
    assert routes.route_of(b"blog.localhost") == "blog"
    assert routes.route_of(b"blog.example.test") is None
    with pytest.raises(ValueError, match="base domain"):
        RouteTable(extra_domains=["bad domain"])


@pytest.mark.parametrize("name", ["", "Blog", "blog.x", "b_x", "x" * 64, "blog/x"])
def test_route_keys_must_be_dns_labels(name: str) -> None:
    with pytest.raises(ValueError, match="route key"):
        RouteTable().set(name, [Backend("r1", 100, [A])])


def test_weights_must_sum_to_100_or_all_be_zero() -> None:
    routes = RouteTable()
    with pytest.raises(ValueError, match="sum to 90"):
        routes.set("blog", [Backend("r1", 80, [A]), Backend("r2", 10, [B])])
    with pytest.raises(ValueError, match="sum to 110"):
        routes.set("blog", [Backend("r1", 100, [A]), Backend("r2", 10, [B])])
    routes.set("blog", [Backend("r1", 90, [A]), Backend("r2", 10, [B])])
    routes.set("blog", [Backend("r1", 0, [A]), Backend("r2", 0, [B])])
    routes.set("blog", [])
    with pytest.raises(ValueError, match="twice"):
        routes.set("blog", [Backend("r1", 50, [A]), Backend("r1", 50, [B])])


@pytest.mark.parametrize("weight", [-1, 101, 50.0, True])
def test_a_weight_is_an_int_from_0_to_100(weight: object) -> None:
    with pytest.raises(ValueError, match="weight"):
        Backend("r1", weight, [A])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "upstream",
    [
        "10.0.0.1:80",
        "localhost:80",
        "127.0.0.2:80",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:80/x",
        "127.0.0.1",
        "http://127.0.0.1:80",
        "[::1]:80",
    ],
)
def test_a_backend_takes_only_loopback_ports(upstream: str) -> None:
    with pytest.raises(ValueError, match="upstream"):
        Backend("r1", 100, [upstream])


def test_a_live_backend_needs_an_instance() -> None:
    with pytest.raises(ValueError, match="no upstreams"):
        Backend("r1", 100, [])
    assert Backend("r1", 0, []).upstreams == ()
    assert Backend("r1", 100, [A, B]).upstreams == (A, B)


def test_a_90_10_split_holds_over_1000_requests_with_a_seeded_rng() -> None:
    routes = RouteTable(rng=random.Random(7))
    routes.set("blog", [Backend("stable", 90, [A]), Backend("canary", 10, [B])])
    chosen = Counter()
    for _ in range(1000):
        resolved = routes.resolve(b"blog.localhost")
        assert resolved is not None
        chosen[resolved.backend.release_id] += 1
    assert 860 <= chosen["stable"] <= 940
    assert chosen["stable"] + chosen["canary"] == 1000


def test_a_zero_weight_backend_gets_nothing() -> None:
    routes = RouteTable(rng=random.Random(7))
    routes.set("blog", [Backend("green", 100, [A]), Backend("blue", 0, [B])])
    picks = {routes.resolve(b"blog.localhost").backend.release_id for _ in range(500)}  # type: ignore[union-attr]
    assert picks == {"green"}


def test_instances_take_turns_and_the_next_one_is_the_fallback() -> None:
    routes = RouteTable()
    routes.set("blog", [Backend("r1", 100, [A, B, C])])
    got = [routes.resolve(b"blog.localhost") for _ in range(4)]
    assert [(r.upstream, r.fallback) for r in got if r] == [(A, B), (B, C), (C, A), (A, B)]
    routes.set("solo", [Backend("r1", 100, [A])])
    solo = routes.resolve(b"solo.localhost")
    assert solo is not None
    assert (solo.route, solo.upstream, solo.fallback) == ("solo", A, None)


def test_resolve_misses_both_unknown_apps_and_apps_without_a_live_release() -> None:
    routes = RouteTable()
    routes.set("idle", [Backend("r1", 0, [A])])
    routes.set("empty", [])
    for host in (b"idle.localhost", b"empty.localhost", b"nope.localhost"):
        assert routes.resolve(host) is None
    assert "idle" in routes
    assert "empty" in routes
    assert "nope" not in routes
    assert routes.keys() == ["empty", "idle"]
    assert routes.get("idle") == [Backend("r1", 0, [A])]


def test_a_route_change_or_removal_applies_to_the_next_resolve() -> None:
    routes = RouteTable()
    routes.set("blog", [Backend("blue", 100, [A])])
    assert routes.resolve(b"blog.localhost").backend.release_id == "blue"  # type: ignore[union-attr]
    routes.set("blog", [Backend("blue", 0, [A]), Backend("green", 100, [B])])
    assert routes.resolve(b"blog.localhost").backend.release_id == "green"  # type: ignore[union-attr]
    routes.remove("blog")
    routes.remove("blog")
    assert routes.resolve(b"blog.localhost") is None
    assert routes.get("blog") is None


def test_counters_count_responses_by_status_class_per_release() -> None:
    counters = Counters()
    counters.record("blog", "r1", 200, 0.010)
    counters.record("blog", "r1", 404, 0.020)
    counters.record("blog", "r1", 500, 0.030)
    counters.record("blog", "r1", 502, 0.001, upstream_error=True)
    counters.record("blog", "r2", 204, 0.040)
    counters.record("shop", "r1", 200, 0.1)
    snap = counters.snapshot("blog")
    assert set(snap) == {"r1", "r2"}
    r1 = snap["r1"]
    assert (r1.requests, r1.status_2xx, r1.status_4xx, r1.status_5xx) == (4, 1, 1, 2)
    assert r1.upstream_errors == 1
    assert r1.error_rate == 0.5
    assert r1.mean_latency == pytest.approx(0.061 / 4)
    assert snap["r2"].requests == 1
    assert counters.get("blog", "nope").requests == 0


def test_a_window_counts_only_what_came_after_its_mark() -> None:
    counters = Counters()
    for _ in range(5):
        counters.record("blog", "canary", 500, 0.01)
    mark = counters.mark("blog", "canary")
    assert counters.since(mark).requests == 0
    counters.record("blog", "canary", 200, 0.01)
    counters.record("blog", "canary", 503, 0.01)
    window = counters.since(mark)
    assert (window.requests, window.status_2xx, window.status_5xx) == (2, 1, 1)
    assert window.error_rate == 0.5
    assert window.seconds >= 0
    assert counters.get("blog", "canary").requests == 7


def test_a_reset_starts_a_release_over_even_for_older_marks() -> None:
    counters = Counters()
    counters.record("blog", "r1", 500, 0.01)
    mark = counters.mark("blog", "r1")
    counters.record("blog", "r1", 500, 0.01)
    counters.reset("blog", "r1")
    counters.record("blog", "r1", 200, 0.01)
    assert counters.get("blog", "r1").requests == 1
    assert counters.since(mark).requests == 1
    assert counters.since(mark).status_5xx == 0


def test_forgetting_an_app_drops_its_counters() -> None:
    counters = Counters()
    counters.record("blog", "r1", 200, 0.01)
    counters.record_no_release("blog")
    counters.record("shop", "r1", 200, 0.01)
    assert counters.no_release("blog") == 1
    counters.forget("blog")
    assert counters.snapshot("blog") == {}
    assert counters.no_release("blog") == 0
    assert counters.snapshot("shop")["r1"].requests == 1


def test_a_route_has_served_once_it_had_a_live_release_and_keeps_it_when_emptied() -> None:
    table = RouteTable()
    table.set("app", [])
    assert not table.has_served("app")
    table.set("app", [Backend("r1", 100, ["127.0.0.1:1"])])
    table.set("app", [])
    assert table.has_served("app")
    table.remove("app")
    assert not table.has_served("app")


def test_the_split_routes_are_the_ones_sharing_traffic_between_releases() -> None:
    table = RouteTable()
    table.set("one--a", [Backend("1-1", 100, ["127.0.0.1:20001"])])
    table.set(
        "canary--a",
        [Backend("2-2", 10, ["127.0.0.1:20002"]), Backend("2-1", 90, ["127.0.0.1:20003"])],
    )
    table.set(
        "warm--a",
        [Backend("3-2", 100, ["127.0.0.1:20004"]), Backend("3-1", 0, ["127.0.0.1:20005"])],
    )
    table.set("none--a", [])
    assert table.split() == ["canary--a"]


def test_a_routes_counters_are_listed_by_release() -> None:
    counters = Counters()
    counters.record("shop--a", "1-1", 200, 0.01)
    counters.record("shop--a", "1-2", 503, 0.01)
    counters.record("other--a", "2-1", 200, 0.01)
    found = {release: cell.stats().status_5xx for release, cell in counters.cells("shop--a")}
    assert found == {"1-1": 0, "1-2": 1}


def test_a_proved_custom_domain_names_its_route_before_the_suffix_rule() -> None:
    hosts = HostMap()
    routes = RouteTable(extra_domains=["apps.example.test"], hosts=hosts)
    routes.set("shop--acme", [Backend("1-1", 100, [A])])
    assert routes.route_of(b"shop.example.test") is None  # not proved: nobody's
    assert routes.resolve(b"shop.example.test") is None
    hosts.set("shop.example.test", "shop--acme")
    for header in (b"shop.example.test", b"SHOP.Example.Test:8088", b"shop.example.test."):
        assert routes.route_of(header) == "shop--acme"  # the cached miss is forgotten
    resolved = routes.resolve(b"shop.example.test")
    assert resolved is not None
    assert resolved.upstream == A
    assert routes.route_of(b"shop--acme.apps.example.test") == "shop--acme"
    hosts.remove("shop.example.test")
    assert routes.route_of(b"shop.example.test") is None  # released: at once
    hosts.replace({"www.example.test": "shop--acme"})
    assert routes.route_of(b"www.example.test") == "shop--acme"
    assert routes.route_of(b"www.example.test:bad") is None
