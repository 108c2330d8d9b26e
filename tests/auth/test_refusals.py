from appdeck.auth.refusals import RefusalCounter


class Clock:
    def __init__(self) -> None:
        self.now = 6000.0  # the start of a minute

    def __call__(self) -> float:
        return self.now


def refusal(source: str | None = "10.0.0.1", status: int = 401, **extra: object) -> dict:
    detail = {"reason": "bad token"} | ({"source": source} if source else {})
    return {"event": "refused", "status": status, "method": "POST", "detail": detail, **extra}


def test_the_first_refusal_of_a_minute_is_written_and_the_rest_become_one_count_row() -> None:
    clock = Clock()
    counter = RefusalCounter(clock=clock)
    admitted = [counter.admit(refusal()) for _ in range(1000)]
    assert admitted == [True] + [False] * 999
    assert counter.due() == []  # the minute is not over
    clock.now += 60
    [row] = counter.due()
    assert row["detail"]["count"] == 999
    assert row["detail"]["source"] == "10.0.0.1"
    assert row["status"] == 401
    assert counter.due() == []
    assert counter.admit(refusal())  # a new minute: written again


def test_sources_statuses_and_principals_are_counted_apart() -> None:
    clock = Clock()
    counter = RefusalCounter(clock=clock)
    assert counter.admit(refusal("10.0.0.1"))
    assert counter.admit(refusal("10.0.0.2"))
    assert counter.admit(refusal("10.0.0.1", status=429))
    assert counter.admit(refusal(None, status=403, tenant_id="acme", user_id="alice"))
    assert counter.admit(refusal(None, status=403, tenant_id="acme", user_id="bob"))
    assert not counter.admit(refusal(None, status=403, tenant_id="acme", user_id="bob"))
    clock.now += 60
    assert [r["user_id"] for r in counter.due()] == ["bob"]


def test_new_sources_past_the_key_limit_share_one_count() -> None:
    clock = Clock()
    counter = RefusalCounter(max_keys=10, clock=clock)
    admitted = [counter.admit(refusal(f"10.0.{i // 250}.{i % 250}")) for i in range(5000)]
    assert sum(admitted) == 11  # ten sources, then the "*" bucket's first
    assert len(counter) == 11
    clock.now += 60
    [row] = counter.due()
    assert row["detail"] == row["detail"] | {"source": "*", "count": 4989}


def test_everything_is_due_at_shutdown() -> None:
    counter = RefusalCounter(clock=Clock())
    counter.admit(refusal())
    counter.admit(refusal())
    assert [r["detail"]["count"] for r in counter.due(everything=True)] == [1]
    assert len(counter) == 0
