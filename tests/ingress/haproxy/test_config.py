"""The rendered HAProxy configuration: weights, states, namespaces, the edge's hooks."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.haproxy.config import (
    EDGE_RULES_MARK,
    Layout,
    Rendered,
    render,
    server_weights,
    state_of,
)
from appdeck.ingress.routes import STOPPED, Backend, RouteTable

LAYOUT = Layout(Path("/run/appdeck/abc123/haproxy"))


def test_a_release_share_is_split_over_its_instances_and_scaled_to_256() -> None:
    weights = server_weights(
        [
            Backend("r1", 90, ["127.0.0.1:1001", "127.0.0.1:1002"]),
            Backend("r2", 10, ["127.0.0.1:1003"]),
        ]
    )
    assert weights == [
        ("r1-0", "127.0.0.1:1001", 256),
        ("r1-1", "127.0.0.1:1002", 256),
        ("r2-0", "127.0.0.1:1003", 57),
    ]
    share = 57 / (256 + 256 + 57)
    assert abs(share - 0.10) < 0.005


def test_a_zero_weight_release_keeps_its_servers_at_weight_0() -> None:
    weights = server_weights(
        [Backend("r1", 100, ["127.0.0.1:1"]), Backend("r2", 0, ["127.0.0.1:2"])]
    )
    assert [w for _, _, w in weights] == [256, 0]


def test_a_sandboxed_instance_is_named_by_its_own_index_not_its_place_in_the_list() -> None:
    weights = server_weights(
        [Backend("1-3", 100, ["1-3.1@127.0.0.1:8000", "1-3.4@127.0.0.1:8000"])]
    )
    assert [name for name, _, _ in weights] == ["1-3-1", "1-3-4"]


def _rendered(backends: list[Backend], expected: dict[str, str] | None = None) -> Rendered:
    table = RouteTable()
    table.set("blog", backends)
    return render(
        table,
        LAYOUT,
        host="127.0.0.1",
        port=8088,
        proxy=ProxyConfig(),
        expected={"blog": expected} if expected else None,
    )


def test_a_config_with_fewer_servers_fits_in_the_running_one_and_one_with_more_does_not() -> None:
    both = _rendered([Backend("r1", 50, ["127.0.0.1:1"]), Backend("r2", 50, ["127.0.0.1:2"])])
    one = _rendered([Backend("r1", 100, ["127.0.0.1:1"])])
    shifted = _rendered([Backend("r1", 10, ["127.0.0.1:1"]), Backend("r2", 90, ["127.0.0.1:2"])])

    assert one.fits_in(both)
    assert shifted.fits_in(both)
    assert not both.fits_in(one)
    assert not _rendered([Backend("r1", 100, ["127.0.0.1:3"])]).fits_in(both)


def test_an_expected_instance_is_rendered_at_weight_0_until_it_is_routed() -> None:
    staged = _rendered([Backend("r1", 100, ["127.0.0.1:1"])], {"r2-0": "127.0.0.1:2"})

    assert staged.weights[("be_blog", "r2-0")] == 0
    assert staged.servers[("be_blog", "r2-0")] == ("blog", "r2")
    assert _rendered([Backend("r2", 100, ["127.0.0.1:2"])]).fits_in(staged)


def test_each_route_state_is_rendered_and_only_live_routes_get_a_backend() -> None:
    table = RouteTable()
    table.set("live", [Backend("r1", 100, ["127.0.0.1:9000"])])
    table.set("fresh", [])
    table.set("off", [Backend(STOPPED, 0)])
    assert [state_of(table, k) for k in ("live", "fresh", "off")] == [
        "live",
        "not_deployed",
        "stopped",
    ]
    rendered = render(table, LAYOUT, host="127.0.0.1", port=8088, proxy=ProxyConfig())
    assert "backend be_live" in rendered.config
    assert "backend be_fresh" not in rendered.config
    assert rendered.files["states.map"] == "fresh not_deployed\nlive live\noff stopped\n"
    assert "bind 127.0.0.1:8088" in rendered.config
    assert f"description {rendered.marker}" in rendered.config


def test_only_a_weight_change_keeps_the_skeleton() -> None:
    table = RouteTable()
    table.set("blog", [Backend("r1", 90, ["127.0.0.1:1"]), Backend("r2", 10, ["127.0.0.1:2"])])
    first = render(table, LAYOUT, host="127.0.0.1", port=8088, proxy=ProxyConfig())
    table.set("blog", [Backend("r1", 50, ["127.0.0.1:1"]), Backend("r2", 50, ["127.0.0.1:2"])])
    second = render(table, LAYOUT, host="127.0.0.1", port=8088, proxy=ProxyConfig())
    assert first.skeleton == second.skeleton
    assert first.weights != second.weights
    table.set("blog", [Backend("r1", 100, ["127.0.0.1:1", "127.0.0.1:3"])])
    third = render(table, LAYOUT, host="127.0.0.1", port=8088, proxy=ProxyConfig())
    assert third.skeleton != first.skeleton
    assert third.marker != first.marker


def test_an_instance_in_a_namespace_is_reached_by_its_name_or_left_out() -> None:
    table = RouteTable()
    table.set("blog", [Backend("r1", 100, ["r1.0@127.0.0.1:5000", "r1.1@127.0.0.1:5001"])])
    names = {"r1.0": "appdeck-abc123-r1.0-77"}
    rendered = render(
        table, LAYOUT, host="127.0.0.1", port=8088, proxy=ProxyConfig(), namespace=names.get
    )
    assert (
        "server r1-0 127.0.0.1:5000 weight 256 namespace appdeck-abc123-r1.0-77" in rendered.config
    )
    assert "127.0.0.1:5001" not in rendered.config


def test_the_edge_rules_go_between_the_route_and_the_backend_choice() -> None:
    table = RouteTable()
    rendered = render(
        table,
        LAYOUT,
        host="127.0.0.1",
        port=8088,
        proxy=ProxyConfig(),
        edge_rules=[
            "http-request set-var(txn.route) str(shop--t1) if { req.hdr(host) shop.example }"
        ],
        edge_sections=["backend be_edge_extra", "    server s 127.0.0.1:1"],
    )
    text = rendered.config
    route = text.index("http-request set-var(txn.route) var(txn.host)")
    edge = text.index("str(shop--t1)")
    state = text.index("set-var(txn.state)")
    assert route < text.index(EDGE_RULES_MARK) < edge < state < text.index("use_backend")
    assert "backend be_edge_extra" in text


def test_a_live_route_has_a_body_limited_twin_with_the_same_servers_and_weights() -> None:
    table = RouteTable()
    table.set("blog", [Backend("r1", 90, ["127.0.0.1:1"]), Backend("r2", 10, ["127.0.0.1:2"])])
    rendered = render(
        table, LAYOUT, host="127.0.0.1", port=8088, proxy=ProxyConfig(max_body_size=4096)
    )
    twin = rendered.config.split("backend bc_blog\n")[1].split("\n\n")[0].splitlines()
    assert twin[0] == "    filter lua.appdeck_body_limit 4096"
    assert twin[1:] == rendered.config.split("backend be_blog\n")[1].split("\n\n")[0].splitlines()
    for server in ("r1-0", "r2-0"):
        assert rendered.weights[("bc_blog", server)] == rendered.weights[("be_blog", server)]
        assert rendered.servers[("bc_blog", server)] == rendered.servers[("be_blog", server)]
    assert f"lua-load {LAYOUT.file('body.lua')}" in rendered.config
    assert "AppDeckBodyLimit" in rendered.files["body.lua"]
    assert rendered.files["e413.map"].startswith('413:json {"error":{"status":413')


def test_the_app_timeout_is_the_longer_of_response_and_idle_and_old_workers_are_bounded() -> None:
    proxy = ProxyConfig(response_timeout=30, idle_timeout=60, reload_drain_timeout=120)
    config = render(RouteTable(), LAYOUT, host="127.0.0.1", port=8088, proxy=proxy).config
    assert "    timeout server 60000ms" in config
    assert "    timeout tunnel 60000ms" in config  # websockets: idle_timeout between frames
    assert "    hard-stop-after 120000ms" in config


def test_the_request_log_is_rendered_only_when_a_target_is_set() -> None:
    table = RouteTable()
    table.set("live", [Backend("r1", 100, ["127.0.0.1:9001"])])
    quiet = render(table, LAYOUT, host="127.0.0.1", port=8088, proxy=ProxyConfig())
    assert "\n    log " not in quiet.config
    assert "option httplog" not in quiet.config
    proxy = ProxyConfig(log_target="/dev/log")
    logged = render(table, LAYOUT, host="127.0.0.1", port=8088, proxy=proxy)
    assert "\n    log /dev/log len 8192 local0\n" in logged.config
    assert "\n    log global\n    option httplog\n" in logged.config


def test_haproxys_own_http_client_loads_no_ca_store_since_no_lua_of_ours_uses_it() -> None:
    # the CA store was ~3/4 of the CPU of every start and reload (docs/data-plane-edge.md);
    # skipping it is only sound while nothing of ours sends through HAProxy's client
    config = render(RouteTable(), LAYOUT, host="127.0.0.1", port=8088, proxy=ProxyConfig()).config
    assert "    httpclient.ssl.verify none" in config.splitlines()
    scripts = sorted(resources.files("appdeck.ingress.haproxy").iterdir(), key=lambda f: f.name)
    lua = [script for script in scripts if script.name.endswith(".lua")]
    assert [script.name for script in lua] == ["body.lua", "edge.lua"]
    for script in lua:
        assert "httpclient" not in script.read_text(), script.name
