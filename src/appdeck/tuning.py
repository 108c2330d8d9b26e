"""Process-level tuning for a long-running server."""

from __future__ import annotations

import gc


def hold_gc() -> None:
    """No cyclic collection while the program loads (``appdeck.__main__``): its imports make
    ~1,500 modules and their classes, models and tables, all kept, and the collector, run by
    allocation count, would walk that growing heap dozens of times (about a fifth of the
    import's CPU). Nothing made then is garbage; :func:`release_gc` or :func:`tune_gc` ends
    the hold. Never called on import: a process that imports ``appdeck`` keeps its own GC."""
    gc.disable()


def release_gc() -> None:
    """End :func:`hold_gc`: the default collection again, for a command that is not a server."""
    gc.enable()


def tune_gc() -> None:
    """Move everything allocated at start-up out of the collector's sight, and collect the
    young generation less often (this ends :func:`hold_gc` too).

    A request allocates a few dozen short-lived containers; with the default threshold (700)
    the collector runs every few requests and rescans what start-up left behind (modules,
    registries, compiled schemas). Freezing that and raising the threshold keeps the cost of
    collection proportional to real garbage. Reference cycles are still collected.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    gc.enable()
