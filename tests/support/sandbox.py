"""The real sandbox for tests that need one: on CI (root, bubblewrap installed) it must be
there; elsewhere its absence skips the test, saying why."""

from __future__ import annotations

import os

import pytest

from appdeck.platform.runtime.sandbox import Sandbox, SandboxUnavailable, detect

CGROUP = os.environ.get("APPDECK_SANDBOX_CGROUP", "appdeck")
"""This test process's cgroup name (each pytest-xdist worker has its own: tests/conftest.py)."""


def sandbox_or_skip(uid_base: int) -> Sandbox:
    try:
        return detect(uid_base, CGROUP)
    except SandboxUnavailable as exc:
        if os.environ.get("CI"):
            raise  # CI runs as root with bubblewrap installed: these tests must run there
        pytest.skip(f"no sandbox on this host: {exc}")
