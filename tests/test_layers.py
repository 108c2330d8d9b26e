"""The layering contracts of DESIGN.md §1 (pyproject.toml, `make lint`) catch an upward
import: a copy of the source with one deliberately added fails them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(source: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("lint-imports")),
            "--no-cache",
            "--config",
            str(ROOT / "pyproject.toml"),
        ],
        cwd=source.parent,
        env={**os.environ, "PYTHONPATH": str(source)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_upward_import_from_the_platform_breaks_the_layering_contract(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "appdeck", source / "appdeck", ignore=shutil.ignore_patterns("__pycache__")
    )
    quotas = source / "appdeck" / "platform" / "quotas.py"
    quotas.write_text(quotas.read_text() + "\nimport appdeck.transport.mcp_http  # upward\n")
    done = _lint_imports(source)
    assert done.returncode != 0
    assert "The platform knows nothing of MCP" in done.stdout
    assert "appdeck.platform.quotas -> appdeck.transport.mcp_http" in done.stdout


def test_an_io_import_in_the_protocol_core_breaks_its_contract(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "appdeck", source / "appdeck", ignore=shutil.ignore_patterns("__pycache__")
    )
    errors = source / "appdeck" / "protocol" / "errors.py"
    errors.write_text(errors.read_text() + "\nimport sqlalchemy  # I/O in the core\n")
    done = _lint_imports(source)
    assert done.returncode != 0
    assert "appdeck.protocol.errors -> sqlalchemy" in done.stdout


def test_a_runtime_import_in_the_kubernetes_manifests_breaks_their_purity_contract(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "appdeck", source / "appdeck", ignore=shutil.ignore_patterns("__pycache__")
    )
    names = source / "appdeck" / "runtime" / "kubernetes" / "names.py"
    names.write_text(names.read_text() + "\nimport appdeck.runtime.local  # not pure\n")
    done = _lint_imports(source)
    assert done.returncode != 0
    assert "The Kubernetes manifests (issue 25) are pure" in done.stdout
    assert "appdeck.runtime.kubernetes.names -> appdeck.runtime.local" in done.stdout
