"""Process-level tuning for a long-running server."""

from __future__ import annotations

import gc
from typing import Final

THRESHOLDS: Final = (20_000, 20, 20)
"""The collector's thresholds once the hold ends (Python's own: 700, 10, 10)."""


def hold_gc() -> None:
    """No cyclic collection while the program loads (``appdeck.__main__``): its imports make
    ~1,500 modules and their classes, models and tables, all kept, and the collector, run by
    allocation count, would walk that growing heap dozens of times (about a fifth of the
    import's CPU). Little made then is garbage (~2,000 objects); :func:`release_gc` or
    :func:`tune_gc` ends the hold. Never called on import: a process that imports ``appdeck``
    keeps its own GC."""
    gc.disable()


def imports_done() -> None:
    """What the imports made is kept for the process's life: frozen (out of the collector's
    sight) at once, without a collection first. The collection that ends a server's start-up
    (:func:`tune_gc`) then walks only what start-up made (~50,000 objects, 0.01 s) instead of
    the whole heap (~300,000, 0.17-0.2 s of each start's ~1.9 s CPU). The price: the import's
    own garbage (~2,000 objects, measured) is never freed."""
    gc.freeze()


def release_gc() -> None:
    """End :func:`hold_gc` for a command that is not a server: collection on, its young
    generation collected less often (as :func:`tune_gc` sets it), since a command's own imports
    (made when it runs) would otherwise walk the growing heap again every 70,000 allocations."""
    gc.set_threshold(*THRESHOLDS)
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
    gc.set_threshold(*THRESHOLDS)
    gc.enable()
