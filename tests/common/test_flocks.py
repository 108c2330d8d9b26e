"""A bounded flock: had at once when free, given up (False) when another holder keeps it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from appdeck.common.flocks import flock_within


def test_a_free_lock_is_had_and_a_kept_one_is_given_up_on(tmp_path: Path) -> None:
    path = tmp_path / "shared.lock"
    mine = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    other = os.open(path, os.O_RDWR)  # another open file: another holder, as a replica
    try:
        assert flock_within(mine, 0.05)
        assert not flock_within(other, 0.05)  # kept by the first: not waited on for long
        fcntl.flock(mine, fcntl.LOCK_UN)
        assert flock_within(other, 0.05)
    finally:
        os.close(mine)
        os.close(other)
