"""Process-level tuning for a long-running server."""

from __future__ import annotations

import gc


def tune_gc() -> None:
    """Move everything allocated at start-up out of the collector's sight, and collect the
    young generation less often.

    A request allocates a few dozen short-lived containers; with the default threshold (700)
    the collector runs every few requests and rescans what start-up left behind (modules,
    registries, compiled schemas). Freezing that and raising the threshold keeps the cost of
    collection proportional to real garbage. Reference cycles are still collected.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
