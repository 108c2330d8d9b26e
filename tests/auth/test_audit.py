from typing import Any

from appdeck.auth.audit import AuditEvent, AuditLog, scrub
from tests.support.wait import until


def test_scrub_drops_anything_that_looks_like_a_credential() -> None:
    detail = {
        "reason": "bad",
        "access_token": "x",
        "client_secret": "y",
        "Password": "z",
        "grant_type": "refresh_token",
        "code_verifier": "v",
    }
    assert scrub(detail) == {"reason": "bad", "grant_type": "refresh_token"}


class Sink:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.fail = 0

    async def append(self, rows: list[dict[str, Any]]) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("database down")
        self.rows.extend(rows)


async def test_records_are_written_in_batches_off_the_request_path() -> None:
    sink = Sink()
    log = AuditLog(sink, flush_seconds=0.01, batch=10)
    log.start()
    for i in range(25):
        log.record(AuditEvent(event="tool_call", outcome="ok", tool=f"t{i}"))
    assert sink.rows == []  # nothing written synchronously
    await until(lambda: len(sink.rows) >= 25)
    await log.close()
    assert [r["tool"] for r in sink.rows] == [f"t{i}" for i in range(25)]


async def test_a_failed_write_is_retried_and_nothing_is_lost() -> None:
    sink = Sink()
    sink.fail = 1
    log = AuditLog(sink)
    log.record(AuditEvent(event="refused", outcome="denied"))
    await log.flush()
    assert sink.rows == []
    await log.close()
    assert len(sink.rows) == 1
