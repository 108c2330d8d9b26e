"""What the composition root builds from the settings (``runtime_setup.py``)."""

from __future__ import annotations

from pathlib import Path

from appdeck.ingress.certs import Certificates
from appdeck.platform.domains.proof import ServedCertificates
from appdeck.runtime_setup import served_certificates
from appdeck.settings import load


class Plane:
    def __init__(self) -> None:
        self.certificates = Certificates()


def test_only_haproxy_with_an_https_listener_reports_certificates(tmp_path: Path) -> None:
    plane = Plane()
    base = {"data_dir": tmp_path}
    assert served_certificates(load(**base, data_plane="haproxy"), plane) is None  # type: ignore[arg-type]
    served = served_certificates(load(**base, data_plane="haproxy", https_port=8443), plane)  # type: ignore[arg-type]
    assert isinstance(served, ServedCertificates)
    python = load(**base, data_plane="python", https_port=8443)
    assert served_certificates(python, plane) is None  # type: ignore[arg-type]
