import ssl

from appdeck.common import outbound_tls


def test_the_shared_context_checks_certificates_and_hostnames_and_is_built_once() -> None:
    context = outbound_tls.verified()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.get_ca_certs()  # certifi's bundle is loaded
    assert outbound_tls.verified() is context
