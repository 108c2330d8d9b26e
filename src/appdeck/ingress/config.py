"""The ingress's limits and timeouts, which the HAProxy configuration is rendered with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Limits and timeouts of the ingress (seconds and bytes)."""

    connect_timeout: float = 2.0
    """Connecting to an upstream instance."""
    response_timeout: float = 30.0
    """From the request being sent to the upstream's response headers."""
    idle_timeout: float = 60.0
    """Between two pieces of a response body (an SSE stream must send something this often),
    and for the upstream to take more of a request body."""
    header_timeout: float = 10.0
    """For a client to send a whole request head (``APPDECK_HEADER_TIMEOUT_SECONDS``); 408."""
    max_headers: int = 100
    """Header lines in a request head (``APPDECK_MAX_HEADERS``); above it, 400 from HAProxy."""
    max_body_size: int = 10 * 1024 * 1024
    """Largest request body forwarded; above it, 413."""
    reload_drain_timeout: float = 900.0
    """HAProxy: how long a reload's old worker may go on serving the streams, websockets and
    downloads it holds before it is stopped (``hard-stop-after``; a route change reloads)."""
    retry_after: int = 5
    log_target: str | None = None
    """HAProxy: where its request log goes as syslog (``APPDECK_DATA_PLANE_LOG``: host:port
    over UDP, or a unix socket's path); None = no request log."""
    """``Retry-After`` seconds on the 503 page of an app with no live release."""
