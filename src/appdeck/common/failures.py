"""Network failures in words a caller can act on: an error message never names a Python class
(``ConnectError`` says nothing to an agent and tells an attacker what the server runs)."""

from __future__ import annotations

import httpx

_WORDS: tuple[tuple[type[BaseException], str], ...] = (
    (httpx.ConnectTimeout, "connecting timed out"),
    (httpx.ConnectError, "the connection was refused or the host is unreachable"),
    (httpx.TimeoutException, "it stopped answering in time"),
    (httpx.RemoteProtocolError, "its answer broke the HTTP protocol"),
    (httpx.ReadError, "the connection broke while reading"),
    (httpx.WriteError, "the connection broke while sending"),
    (httpx.TooManyRedirects, "it redirected too many times"),
    (httpx.UnsupportedProtocol, "the URL's scheme is not supported"),
    (httpx.InvalidURL, "the URL is not valid"),
    (httpx.ProxyError, "the proxy refused the connection"),
    (httpx.DecodingError, "its answer could not be decoded"),
)


def http_failure(exc: BaseException) -> str:
    """What went wrong with an HTTP exchange, in words."""
    for kind, words in _WORDS:
        if isinstance(exc, kind):
            return words
    return "a network error"
