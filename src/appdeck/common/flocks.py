"""An ``flock`` waited for a bounded moment, for the files the replicas of one host share and
hold for a read and a write: whoever is stopped inside one (SIGSTOP, a paused VM) must not stall
the others' event loops for as long as it is away. (The release log's writer has its own copy,
:func:`appdeck.runtime.logfile.lock_within`: the instance shim loads that module alone.)"""

from __future__ import annotations

import fcntl
import time
from typing import Final

FIRST_PAUSE_S: Final = 0.0005
MAX_PAUSE_S: Final = 0.01


def flock_within(fd: int, seconds: float) -> bool:
    """An exclusive ``flock`` on ``fd``, tried without blocking for at most ``seconds``
    (pauses doubling from 0.5 ms to 10 ms): whether it was had."""
    deadline = time.monotonic() + seconds
    pause = FIRST_PAUSE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(pause)
        pause = min(pause * 2, MAX_PAUSE_S)
