"""The deployment state machine (this module owns it; every step is persisted).

    queued ─▶ building ─▶ starting ─▶ live ─▶ superseded ─▶ live (rollback to it)
                 │            │   └──▶ canary ─▶ live
                 │            │            └──▶ rolled_back  (analysis failed: old release kept)
                 ▼            ▼
              failed       failed / cancelled            live ─▶ rolled_back (rollback past it)

``failed`` and ``cancelled`` are terminal. ``superseded`` and ``rolled_back`` releases may come
back to ``live`` through a rollback (instantly while their instances are still warm).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

QUEUED: Final = "queued"
BUILDING: Final = "building"
STARTING: Final = "starting"
CANARY: Final = "canary"
LIVE: Final = "live"
FAILED: Final = "failed"
ROLLED_BACK: Final = "rolled_back"
CANCELLED: Final = "cancelled"
SUPERSEDED: Final = "superseded"

TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    QUEUED: frozenset({BUILDING, FAILED, CANCELLED}),
    BUILDING: frozenset({STARTING, FAILED, CANCELLED}),
    STARTING: frozenset({CANARY, LIVE, FAILED, CANCELLED}),
    CANARY: frozenset({LIVE, ROLLED_BACK, FAILED, CANCELLED}),
    LIVE: frozenset({SUPERSEDED, ROLLED_BACK}),
    SUPERSEDED: frozenset({LIVE}),
    ROLLED_BACK: frozenset({LIVE}),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}
IN_PROGRESS: Final = frozenset({QUEUED, BUILDING, STARTING, CANARY})
"""A deployment some process is driving; at most one per app."""
SETTLED: Final = frozenset({LIVE, FAILED, ROLLED_BACK, CANCELLED, SUPERSEDED})


class IllegalTransition(RuntimeError):
    """A programming error: a move the table does not allow."""


def check(current: str, target: str) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"deployment {current} -> {target}")
