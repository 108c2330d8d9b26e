"""The operator's certificate files: loaded when sound, refused with a clear line when not."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appdeck.platform.tls import pem

PKCS8 = (serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8)


def self_signed(
    tmp_path: Path, names: list[str], *, days: float = 30, starts: float = -1
) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "operator test CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=starts))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(*PKCS8, serialization.NoEncryption()))
    return cert_path, key_path


def test_a_sound_pair_is_loaded_with_the_names_it_covers(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, ["*.apps.example.test", "appdeck.example.test"])
    chain, key_pem = pem.load_operator_files(cert, key, time.time())
    assert chain.hostnames == ("*.apps.example.test", "appdeck.example.test")
    assert chain.issuer == "operator test CA"
    assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert pem.covers(chain.hostnames, "shop--acme.apps.example.test")
    assert not pem.covers(chain.hostnames, "a.b.apps.example.test")  # one label only
    assert not pem.covers(chain.hostnames, "apps.example.test")


def test_a_key_of_another_certificate_is_refused(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path / "a", ["a.example.test"])
    _, other = self_signed(tmp_path / "b", ["a.example.test"])
    with pytest.raises(pem.BadCertificate, match=r"^the key does not match APPDECK_TLS_CERT$"):
        pem.load_operator_files(cert, other, time.time())


def test_an_expired_certificate_is_refused_with_its_end(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, ["a.example.test"], days=-1, starts=-10)
    with pytest.raises(pem.BadCertificate, match=r"^APPDECK_TLS_CERT expired at 20"):
        pem.load_operator_files(cert, key, time.time())


def test_a_certificate_not_valid_yet_is_refused(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, ["a.example.test"], days=10, starts=2)
    with pytest.raises(pem.BadCertificate, match=r"^APPDECK_TLS_CERT is not valid yet$"):
        pem.load_operator_files(cert, key, time.time())


def test_garbage_missing_files_and_encrypted_keys_are_refused_without_paths(
    tmp_path: Path,
) -> None:
    cert, key = self_signed(tmp_path, ["a.example.test"])
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"hello\x00world\n" * 10)
    locked = tmp_path / "locked.key"
    raw = serialization.load_pem_private_key(key.read_bytes(), password=None)
    locked.write_bytes(raw.private_bytes(*PKCS8, serialization.BestAvailableEncryption(b"pw")))
    huge = tmp_path / "huge.pem"
    huge.write_bytes(b"A" * (pem.MAX_PEM + 10))
    cases = [
        (junk, key, "APPDECK_TLS_CERT holds no PEM certificate"),
        (huge, key, "APPDECK_TLS_CERT is larger than 256 KiB"),
        (tmp_path / "absent.pem", key, "APPDECK_TLS_CERT cannot be read"),
        (cert, tmp_path / "absent.key", "APPDECK_TLS_KEY cannot be read"),
        (cert, junk, "the key of APPDECK_TLS_CERT is not an unencrypted PEM private key"),
        (cert, locked, "the key of APPDECK_TLS_CERT is not an unencrypted PEM private key"),
    ]
    for cert_path, key_path, message in cases:
        with pytest.raises(pem.BadCertificate) as refused:
            pem.load_operator_files(cert_path, key_path, time.time())
        assert str(refused.value) == message
        assert str(tmp_path) not in str(refused.value)


def test_a_certificate_without_dns_names_is_refused(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "no sans")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    with pytest.raises(pem.BadCertificate, match="names no DNS host"):
        pem.read_chain(cert.public_bytes(serialization.Encoding.PEM), "APPDECK_TLS_CERT")


def test_a_fresh_key_and_csr_name_the_hosts() -> None:
    key = pem.new_key()
    request = x509.load_pem_x509_csr(pem.csr(key, ("a.example.test", "b.example.test")))
    sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert sans.value.get_values_for_type(x509.DNSName) == ["a.example.test", "b.example.test"]
    assert pem.new_key() != key  # one key per certificate
