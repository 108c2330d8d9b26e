"""Per-backend request and 5xx counters for the canary analysis, read from the gateway.

:class:`PrometheusBackendMetrics` scrapes a Prometheus text endpoint of the gateway's proxy
(Envoy's ``/stats/prometheus``) and sums, over the series whose ``backend_label`` names the
backend, ``envoy_cluster_upstream_rq_total`` (requests) and ``envoy_cluster_upstream_rq_xx``
with ``envoy_response_code_class="5"`` (5xx). Which series name a backend is the gateway's
choice: ``backend_match`` is a template of the part of the label value that does
(``{namespace}/{service}/`` by default, the Service in Envoy Gateway's cluster names), an
operator setting. **Not proved here**: no Envoy ran in these tests (the parser and the sums are
tested on a scraped text); that the gateway keeps one series per backendRef of a weighted rule
is what ``make k8s-e2e`` must show on a real gateway.
"""

from __future__ import annotations

from typing import Final

import httpx
from prometheus_client.parser import text_string_to_metric_families

REQUESTS: Final = "envoy_cluster_upstream_rq_total"
BY_CLASS: Final = "envoy_cluster_upstream_rq_xx"
SCRAPE_TIMEOUT_S: Final = 5.0


class PrometheusBackendMetrics:
    """A gateway's Prometheus text endpoint as :class:`.router.BackendMetrics`."""

    def __init__(
        self,
        url: str,
        *,
        client: httpx.AsyncClient | None = None,
        backend_label: str = "envoy_cluster_name",
        backend_match: str = "{namespace}/{service}/",
    ) -> None:
        self.url = url
        self.client = client or httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S)
        self.backend_label = backend_label
        self.backend_match = backend_match

    async def counts(self, namespace: str, service: str) -> tuple[int, int]:
        response = await self.client.get(self.url, timeout=SCRAPE_TIMEOUT_S)
        response.raise_for_status()
        return counts_in(
            response.text,
            self.backend_label,
            self.backend_match.format(namespace=namespace, service=service),
        )


def counts_in(text: str, label: str, match: str) -> tuple[int, int]:
    """(requests, 5xx) summed over the series of ``text`` whose ``label`` contains ``match``."""
    requests = errors = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if match not in sample.labels.get(label, ""):
                continue
            # the parser names a counter's samples ``<name>_total`` whatever the text said
            name = sample.name.removesuffix("_total")
            if name == REQUESTS.removesuffix("_total"):
                requests += sample.value
            elif name == BY_CLASS and sample.labels.get("envoy_response_code_class") == "5":
                errors += sample.value
    return int(requests), int(errors)


class NoMetrics:
    """No gateway metrics configured: every window is empty (the canary is judged on its
    health alone)."""

    async def counts(self, namespace: str, service: str) -> tuple[int, int]:
        return (0, 0)


NO_METRICS: Final = NoMetrics()
