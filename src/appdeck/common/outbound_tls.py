"""The TLS context of AppDeck's own outbound HTTPS clients (GitHub's API, OAuth client
metadata documents): httpx's default (certifi's CA bundle, hostnames checked, the
environment's ``SSL_CERT_FILE`` ignored as those clients ignore the environment), built once.

An ``httpx.AsyncClient`` given no context builds its own: ~20 ms of CPU loading the CA bundle,
on every call of the services that make a client per request. A context is safe to share
between clients and threads; nothing here changes it after it is built.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def verified() -> ssl.SSLContext:
    """The shared context: certificates verified against certifi's bundle."""
    return httpx.create_ssl_context(trust_env=False)
