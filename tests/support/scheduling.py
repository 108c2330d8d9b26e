"""How ``--dist loadfile`` hands test modules to the xdist workers, with two changes: every
module that starts ``appdeck serve`` replica sets (:func:`tests.support.replicas.run_replicas`)
goes to one worker, as one unit; and the units are handed out longest first (:func:`weight`).

A replica set holds a machine-wide lock while it runs (three servers' PostgreSQL pools; two sets
at once exhaust the server's connections), so two such modules on two workers took turns: one
worker sat in a fixture's set-up, idle, while the other's set ran (in a `-n 2` run, 2026-11-28,
up to 76 s for one test, 100-170 s of idle worker time in all). On one worker they run one
after another anyway and the other workers keep taking modules. Which modules those are is
read from their source (a call of ``run_replicas``), not kept in a list.

Longest first: the replica-set unit is about 400 worker-seconds of a ~770 s run; handed out in
xdist's order (most tests first) it started mid-run and ran on alone at the end, beside idle
workers. The units are ordered by an estimate read from their source (:func:`weight`): the
replica sets first, then the modules that start server processes or a browser, then the rest,
each by its number of tests.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

REPLICA_SETS = "replica-sets"
"""The work unit of every module that starts replica sets."""


class ReplicaSetsTogether(LoadFileScheduling):
    """``loadfile``, but the replica-set modules are one unit (:data:`REPLICA_SETS`)."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._root = config.rootpath
        self._ordered = False

    def _split_scope(self, nodeid: str) -> str:
        module = super()._split_scope(nodeid)
        return REPLICA_SETS if starts_replica_sets(self._root / module) else module

    def _assign_work_unit(self, node: Any) -> None:
        # the first call comes once the queue is whole: it is put in our order then (the
        # collection itself keeps its order: workers are sent indexes into theirs)
        if not self._ordered:
            self._ordered = True
            units = sorted(
                self.workqueue.items(),
                key=lambda unit: weight(self._root, unit[0], len(unit[1])),
                reverse=True,
            )
            self.workqueue = OrderedDict(units)
        super()._assign_work_unit(node)


HEAVY = ("start_appdeck(", "AppDeckProcess", "pytest.mark.e2e", "chromium")
"""What a module's source says when its tests start server processes or a browser."""


def weight(root: Path, unit: str, tests: int) -> tuple[int, int]:
    """A unit's place in the order, greatest first: (kind, number of tests)."""
    if unit == REPLICA_SETS:
        return (2, tests)
    try:
        source = (root / unit).read_text()
    except OSError:
        return (0, tests)
    return (1 if any(mark in source for mark in HEAVY) else 0, tests)


@functools.cache
def starts_replica_sets(module: Path) -> bool:
    """Whether the test module ``module`` calls ``run_replicas``."""
    try:
        return module.name.startswith("test_") and "run_replicas(" in module.read_text()
    except OSError:
        return False
