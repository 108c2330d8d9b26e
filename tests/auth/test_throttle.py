from appdeck.auth.throttle import AuthThrottles, FailureThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_free_failures_cost_nothing_then_each_one_doubles_the_wait() -> None:
    clock = Clock()
    throttle = FailureThrottle(free=3, window=60, base_seconds=1, max_seconds=8, clock=clock)
    assert [throttle.failed("ip") for _ in range(3)] == [None, None, None]
    assert throttle.blocked("ip") is None
    assert throttle.failed("ip") == 1
    assert throttle.blocked("ip") == 1
    clock.now += 1
    assert throttle.blocked("ip") is None
    assert [throttle.failed("ip") for _ in range(4)] == [2, 4, 8, 8]  # capped at max_seconds


def test_a_key_without_failures_for_a_window_starts_afresh() -> None:
    clock = Clock()
    throttle = FailureThrottle(free=1, window=60, clock=clock)
    throttle.failed("ip")
    assert throttle.failed("ip") == 1
    clock.now += 61
    assert throttle.blocked("ip") is None
    assert throttle.failed("ip") is None


def test_keys_are_throttled_apart_and_a_success_forgets_one() -> None:
    throttle = FailureThrottle(free=0, window=60, clock=Clock())
    throttle.failed("a")
    assert throttle.blocked("a") == 1
    assert throttle.blocked("b") is None
    throttle.forget("a")
    assert throttle.blocked("a") is None


def test_memory_is_bounded_forgetting_the_least_recently_failed() -> None:
    throttle = FailureThrottle(free=5, window=60, max_keys=100, clock=Clock())
    for i in range(1000):
        throttle.failed(f"ip{i}")
    assert len(throttle) == 100


def test_sign_in_waits_for_the_account_even_from_a_fresh_address() -> None:
    clock = Clock()
    throttles = AuthThrottles.build(sign_in_per_ip=100, sign_in_per_account=2, clock=clock)
    for i in range(3):
        throttles.sign_in_failed(f"10.0.0.{i}", "acme\x00alice")
    assert throttles.sign_in_wait("10.9.9.9", "acme\x00alice") == 1
    assert throttles.sign_in_wait("10.9.9.9", "acme\x00bob") is None


def test_sign_in_waits_for_the_address_whatever_the_account() -> None:
    throttles = AuthThrottles.build(sign_in_per_ip=2, sign_in_per_account=100, clock=Clock())
    for i in range(3):
        throttles.sign_in_failed("10.0.0.1", f"acme\x00user{i}")
    assert throttles.sign_in_wait("10.0.0.1", "acme\x00someone-else") == 1
    assert throttles.sign_in_wait("10.0.0.2", "acme\x00someone-else") is None


def test_registrations_are_a_rate_per_hour() -> None:
    clock = Clock()
    throttles = AuthThrottles.build(register_per_hour=3, clock=clock)
    assert [throttles.register.check("ip") for _ in range(3)] == [None, None, None]
    assert throttles.register.check("ip") == 1_200_000  # one more in 20 minutes
    clock.now += 1200
    assert throttles.register.check("ip") is None


def test_a_successful_sign_in_clears_the_accounts_count_but_not_the_addresss() -> None:
    throttles = AuthThrottles.build(sign_in_per_ip=3, sign_in_per_account=2, clock=lambda: 0.0)
    for _ in range(3):  # one past the account's two free failures
        throttles.sign_in_failed("10.0.0.1", "acme\x00ada")
    assert throttles.sign_in_wait("10.0.0.2", "acme\x00ada") is not None
    throttles.sign_in_succeeded("acme\x00ada")
    assert throttles.sign_in_wait("10.0.0.2", "acme\x00ada") is None
    throttles.sign_in_failed("10.0.0.1", "acme\x00bob")  # the address's fourth
    assert throttles.sign_in_wait("10.0.0.1", "acme\x00carol") is not None
