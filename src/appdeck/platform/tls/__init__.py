"""Automatic TLS for the data plane (issue 21 §3): an ACME client (:mod:`.ca`, on certbot's
``acme`` package) that obtains and renews certificates for app hostnames, claimed custom
domains and the control plane's public host (:mod:`.names`), stores them sealed and shared by
every replica (``storage/tls.py``), and hands them and the HTTP-01 answers to the data plane
(``ingress/certs.py``, ``ingress/challenges.py``): :mod:`.service`. The operator's own files
(``APPDECK_TLS_CERT``/``APPDECK_TLS_KEY``) are the alternative (:mod:`.pem`)."""

from appdeck.platform.tls.names import ClaimedDomains, PlatformNames, cert_name
from appdeck.platform.tls.pem import BadCertificate
from appdeck.platform.tls.service import TlsConfig, TlsService

__all__ = [
    "BadCertificate",
    "ClaimedDomains",
    "PlatformNames",
    "TlsConfig",
    "TlsService",
    "cert_name",
]
