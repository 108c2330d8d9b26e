"""The Grafana dashboard (docs/grafana/appdeck.json) and docs/observability.md cannot drift:
every metric a panel or a variable queries is documented there, and every query is PromQL that
Prometheus' own checker (``promtool``, from Debian's ``prometheus``) accepts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "appdeck.json"
DOCS = ROOT / "docs" / "observability.md"

METRIC = re.compile(r"\bappdeck_[a-z0-9_]+")
SUFFIXES = ("_bucket", "_count", "_sum")


def _dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def _queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables'."""
    found = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


def _family(name: str) -> str:
    """A series' family: ``x_bucket``, ``x_count`` and ``x_sum`` are histogram ``x``'s."""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def _documented() -> set[str]:
    return {_family(name) for name in METRIC.findall(DOCS.read_text())}


def test_every_metric_the_dashboard_queries_is_documented() -> None:
    documented = _documented()
    queried = {_family(n) for q in _queries(_dashboard()) for n in METRIC.findall(q)}
    assert len(queried) > 30  # the four rows' series, not a parse that found nothing
    assert queried - documented == set(), "dashboard series missing from docs/observability.md"


def test_the_storage_and_ci_series_are_on_the_dashboard() -> None:
    queried = {_family(n) for q in _queries(_dashboard()) for n in METRIC.findall(q)}
    for name in (
        "appdeck_db_query_seconds",
        "appdeck_db_pool_connections",
        "appdeck_redis_command_seconds",
        "appdeck_redis_pool_connections",
        "appdeck_replica_heartbeats_total",
        "appdeck_replica_peers",
        "appdeck_leases_held",
        "appdeck_ci_runs_total",
        "appdeck_ci_run_seconds",
    ):
        assert name in queried, name


def test_the_dashboard_has_a_datasource_and_an_app_variable_and_uses_them() -> None:
    dashboard = _dashboard()
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert (
        variables["app"]["query"]["query"] == "label_values(appdeck_app_http_requests_total, app)"
    )
    panels = [p for p in _panels(dashboard) if p["type"] != "row"]
    assert [p["title"] for p in dashboard["panels"] if p["type"] == "row"] == [
        "MCP",
        "Deploys",
        "Apps ($app)",
        "Storage and replicas",
    ]
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            if "appdeck_app_" in target["expr"]:
                assert 'app=~"$app"' in target["expr"], target["expr"]


def test_every_query_is_promql_that_promtool_accepts(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: `make test-deps` installs Debian's prometheus")
    rules = [
        {"record": f"dashboard:query_{n}", "expr": _as_prometheus_sees_it(query)}
        for n, query in enumerate(_queries(_dashboard()))
        if not query.startswith("label_values(")  # Grafana's, not PromQL
    ]
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))  # JSON is YAML
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _as_prometheus_sees_it(query: str) -> str:
    """Grafana's variables as Grafana would fill them in."""
    return query.replace("$__rate_interval", "1m").replace("$app", ".*")
