"""Public hostnames and custom domains (issue 21 §2).

- :mod:`.names`: which hostnames an app's spec may list (public DNS names, never the
  platform's own), normalized.
- :mod:`.proof`: the ports a proof goes through: a TXT lookup (:class:`TxtResolver`, dnspython
  by default) and the TLS state the ACME part reports (:class:`TlsStatus`).
- :mod:`.urls`: where an app answers (the public URL first).
- :mod:`.service`: claims, proofs, takeovers, and the data plane's host map kept in step.
"""

from appdeck.platform.domains.proof import DnsTxtResolver, NoTls, TlsStatus, TxtResolver
from appdeck.platform.domains.service import DomainService
from appdeck.platform.domains.urls import AppUrls

__all__ = ["AppUrls", "DnsTxtResolver", "DomainService", "NoTls", "TlsStatus", "TxtResolver"]
