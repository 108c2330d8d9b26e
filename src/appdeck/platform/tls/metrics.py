"""Prometheus metrics of automatic TLS (the process's default registry, served at
``/metrics`` with the rest)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

CERTIFICATES: Final = Gauge(
    "appdeck_tls_certificates", "Certificates the platform manages, by state", ["state"]
)
ORDERS: Final = Counter(
    "appdeck_tls_orders_total", "ACME orders, by outcome (issued, failed, limited)", ["outcome"]
)
ISSUANCE: Final = Histogram(
    "appdeck_tls_issuance_seconds",
    "From an order's start to its certificate stored",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120),
)
SOONEST_EXPIRY: Final = Gauge(
    "appdeck_tls_soonest_expiry_seconds", "Seconds until the first served certificate expires"
)
