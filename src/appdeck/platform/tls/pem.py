"""Certificates and keys as PEM: a fresh key and CSR per certificate, a chain read back
(validity, names, issuer), and the operator's files checked before anything serves them.

Every check here fails with :class:`BadCertificate`, whose text is one line for a person
(which file, what is wrong); it never carries a library's message.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

MAX_PEM: Final = 256 * 1024
"""A chain or key file larger than this is not a certificate (a chain is a few KiB)."""


class BadCertificate(ValueError):
    """A certificate or key that cannot be served; ``str()`` says why, in one line."""


@dataclass(frozen=True, slots=True)
class Chain:
    """A parsed chain (leaf first) and what the platform needs of it."""

    pem: bytes
    hostnames: tuple[str, ...]
    issuer: str
    not_before: float
    not_after: float


def new_key() -> bytes:
    """A fresh P-256 key (PKCS#8 PEM): one per certificate, never reused across renewals."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def csr(key_pem: bytes, hostnames: tuple[str, ...]) -> bytes:
    """A CSR for ``hostnames`` (SANs; the first is also the CN when it fits 64 characters)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise BadCertificate("the certificate key must be an EC or RSA key")
    subject = (
        [x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])] if len(hostnames[0]) <= 64 else []
    )
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name(subject))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(name) for name in hostnames]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM)


def _epoch(moment: datetime.datetime) -> float:
    return (
        moment.replace(tzinfo=datetime.UTC).timestamp()
        if moment.tzinfo is None
        else (moment.timestamp())
    )


def read_chain(pem: bytes, what: str = "the certificate") -> Chain:
    """Parse a chain (leaf first). ``what`` names it in errors."""
    if len(pem) > MAX_PEM:
        raise BadCertificate(f"{what} is larger than {MAX_PEM // 1024} KiB")
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise BadCertificate(f"{what} holds no PEM certificate") from None
    leaf = certs[0]
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        names = tuple(name.lower() for name in sans.value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = ()
    if not names:
        raise BadCertificate(f"{what} names no DNS host (subjectAltName)")
    issuers = leaf.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)
    issuer = str(issuers[0].value) if issuers else leaf.issuer.rfc4514_string()
    return Chain(
        pem=pem,
        hostnames=names,
        issuer=issuer[:256],
        not_before=_epoch(leaf.not_valid_before_utc),
        not_after=_epoch(leaf.not_valid_after_utc),
    )


def check_pair(chain: Chain, key_pem: bytes, now: float, what: str = "the certificate") -> None:
    """The key is the leaf's, and the leaf is valid now."""
    if len(key_pem) > MAX_PEM:
        raise BadCertificate(f"the key of {what} is larger than {MAX_PEM // 1024} KiB")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise BadCertificate(f"the key of {what} is not an unencrypted PEM private key") from None
    leaf = x509.load_pem_x509_certificates(chain.pem)[0]
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise BadCertificate(f"the key does not match {what}")
    if chain.not_after <= now:
        when = datetime.datetime.fromtimestamp(chain.not_after, datetime.UTC).isoformat()
        raise BadCertificate(f"{what} expired at {when}")
    if chain.not_before > now:
        raise BadCertificate(f"{what} is not valid yet")


def load_operator_files(cert_path: Path, key_path: Path, now: float) -> tuple[Chain, bytes]:
    """``APPDECK_TLS_CERT`` / ``APPDECK_TLS_KEY``, read and checked (the operator's own
    files: their errors name the setting, which is the operator's to fix)."""
    try:
        chain_pem = cert_path.read_bytes()[: MAX_PEM + 1]
    except OSError:
        raise BadCertificate("APPDECK_TLS_CERT cannot be read") from None
    try:
        key_pem = key_path.read_bytes()[: MAX_PEM + 1]
    except OSError:
        raise BadCertificate("APPDECK_TLS_KEY cannot be read") from None
    chain = read_chain(chain_pem, "APPDECK_TLS_CERT")
    check_pair(chain, key_pem, now, "APPDECK_TLS_CERT")
    return chain, key_pem


def covers(hostnames: tuple[str, ...], host: str) -> bool:
    """Whether a certificate for ``hostnames`` serves ``host`` (exact, or one-label wildcard)."""
    host = host.lower().rstrip(".")
    if host in hostnames:
        return True
    parent = host.split(".", 1)[1] if "." in host else ""
    return bool(parent) and f"*.{parent}" in hostnames
