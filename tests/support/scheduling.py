"""How ``--dist loadfile`` hands test modules to the xdist workers, with one change: every
module that starts ``appdeck serve`` replica sets (:func:`tests.support.replicas.run_replicas`)
goes to one worker, as one unit.

A replica set holds a machine-wide lock while it runs (three servers' PostgreSQL pools; two sets
at once exhaust the server's connections), so two such modules on two workers took turns: one
worker sat in a fixture's set-up, idle, while the other's set ran (in a `-n 2` run, 2026-11-28,
up to 76 s for one test, 100-170 s of idle worker time in all). On one worker they run one
after another anyway and the other workers keep taking modules. Which modules those are is
read from their source (a call of ``run_replicas``), not kept in a list.
"""

from __future__ import annotations

import functools
from pathlib import Path

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

    def _split_scope(self, nodeid: str) -> str:
        module = super()._split_scope(nodeid)
        return REPLICA_SETS if starts_replica_sets(self._root / module) else module


@functools.cache
def starts_replica_sets(module: Path) -> bool:
    """Whether the test module ``module`` calls ``run_replicas``."""
    try:
        return module.name.startswith("test_") and "run_replicas(" in module.read_text()
    except OSError:
        return False
