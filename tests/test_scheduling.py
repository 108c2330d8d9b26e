"""The suite's own scheduler (tests/support/scheduling.py): which units go first."""

from __future__ import annotations

from pathlib import Path

from tests.support.scheduling import REPLICA_SETS, starts_replica_sets, weight

ROOT = Path(__file__).parent.parent


def test_replica_sets_go_first_then_server_modules_then_the_rest_by_their_tests() -> None:
    assert starts_replica_sets(ROOT / "tests/e2e/test_replicas_story.py")
    replicas = weight(ROOT, REPLICA_SETS, 3)
    servers = weight(ROOT, "tests/e2e/test_server_process.py", 500)
    fairness = weight(ROOT, "tests/transport/test_fairness.py", 2)
    unit = weight(ROOT, "tests/protocol/test_jsonrpc.py", 1_000)
    gone = weight(ROOT, "tests/no_such_module.py", 5)
    assert replicas > servers > unit > gone
    assert fairness > unit
