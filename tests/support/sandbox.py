"""The real sandbox for tests that need one: on CI (root, bubblewrap installed) it must be
there; elsewhere its absence skips the test, saying why."""

from __future__ import annotations

import os

import pytest

from appdeck.runtime.sandbox import Sandbox, SandboxUnavailable, detect

CGROUP = os.environ.get("APPDECK_SANDBOX_CGROUP") or f"appdeck/test-{os.getpid()}"
"""The cgroup of the sandboxes this test process makes without a server (so without an
install of their own): its own, since release ids such as "1-1" repeat across test processes
and sessions on one host."""


def sandbox_or_skip(uid_base: int) -> Sandbox:
    try:
        return detect(uid_base, CGROUP)
    except SandboxUnavailable as exc:
        if os.environ.get("CI"):
            raise  # CI runs as root with bubblewrap installed: these tests must run there
        pytest.skip(f"no sandbox on this host: {exc}")
