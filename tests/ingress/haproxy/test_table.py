"""The route table the HAProxy data plane keeps in effect: expected instances and sets."""

from __future__ import annotations

from appdeck.ingress.haproxy.table import HAProxyTable
from appdeck.ingress.routes import Backend


def test_an_instance_is_expected_only_on_a_route_that_exists_and_until_it_is_routed() -> None:
    table = HAProxyTable()
    table.expect("blog", "r2", 0, "127.0.0.1:2")
    assert table.expected() == {}
    table.set("blog", [Backend("r1", 100, ["127.0.0.1:1"])])
    version = table.routes_version

    table.expect("blog", "r2", 0, "127.0.0.1:2")

    assert table.expected() == {"blog": {"r2-0": "127.0.0.1:2"}}
    assert table.routes_version == version  # nothing to wait for: no route changed
    table.set("blog", [Backend("r2", 100, ["127.0.0.1:2"])])
    assert table.expected() == {}


def test_a_release_s_set_is_starting_until_every_instance_of_it_is_expected() -> None:
    """What holds a reload for the set's next instance (never a rolling deploy's second)."""
    table = HAProxyTable()
    table.set("blog", [Backend("r1", 100, ["127.0.0.1:1"])])
    assert table.set_starting() == 0.0
    table.expect("blog", "r2", 0, "127.0.0.1:2", of=2)
    assert table.set_starting() > 0.0
    table.expect("blog", "r2", 1, "127.0.0.1:3", of=2)
    assert table.set_starting() == 0.0
    table.expect("blog", "r3", 0, "127.0.0.1:4")  # one instance: its set is whole at once
    assert table.set_starting() == 0.0
