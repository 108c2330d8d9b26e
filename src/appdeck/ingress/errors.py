"""Why an exchange with an upstream failed, and the proxy's own control-flow exceptions.

Each :class:`UpstreamError` carries the ``status`` the client gets (and the ``code`` on its
error page); the others stop a request early (client gone, body too large, HEAD parsed).
"""

from __future__ import annotations


class UpstreamError(Exception):
    """The upstream could not give a (whole) response; ``status`` is what the client gets."""

    status = 502
    code = "upstream_unavailable"


class _ConnectFailed(UpstreamError):
    pass


class _ConnectTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class _ResponseTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class _IdleTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class _Closed(UpstreamError):
    pass


class _ShuttingDown(UpstreamError):
    status = 503
    code = "shutting_down"


class _BadResponse(UpstreamError):
    pass


class _ClientGone(Exception):
    pass


class _TooLarge(Exception):
    pass


class _StopParsing(Exception):
    """Raised from a parser callback to stop at the end of the response (HEAD)."""
