"""What the composition root builds from the settings (``runtime_setup.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.ingress.certs import Certificates
from appdeck.platform.domains.proof import ServedCertificates
from appdeck.runtime_setup import served_certificates
from appdeck.settings import InvalidSetting, load


class Plane:
    def __init__(self) -> None:
        self.certificates = Certificates()


def test_certificates_are_reported_only_with_an_https_listener(tmp_path: Path) -> None:
    plane = Plane()
    base = {"data_dir": tmp_path}
    assert served_certificates(load(**base), plane) is None  # type: ignore[arg-type]
    served = served_certificates(load(**base, https_port=8443), plane)  # type: ignore[arg-type]
    assert isinstance(served, ServedCertificates)


def test_the_removed_python_ingress_is_refused_naming_the_data_plane_there_is(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidSetting, match=r"APPDECK_DATA_PLANE.*haproxy"):
        load(data_dir=tmp_path, data_plane="python")
