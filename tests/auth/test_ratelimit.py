from appdeck.auth.ratelimit import RateLimiter


def test_a_burst_is_allowed_then_the_rate_applies() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2, burst=3, clock=lambda: now[0])
    assert [limiter.check("t") for _ in range(3)] == [None, None, None]
    wait = limiter.check("t")
    assert wait == 500
    now[0] += 0.5
    assert limiter.check("t") is None


def test_tokens_have_separate_buckets() -> None:
    limiter = RateLimiter(rate=1, burst=1, clock=lambda: 0.0)
    assert limiter.check("a") is None
    assert limiter.check("b") is None
    assert limiter.check("a") is not None


def test_a_zero_rate_means_no_limit() -> None:
    limiter = RateLimiter(rate=0, burst=1)
    assert all(limiter.check("t") is None for _ in range(1000))
