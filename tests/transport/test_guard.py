"""The guard's limits on their own: the rate limit counts the verified token, and an address
with too many failed authentications is refused before its token is looked at."""

from __future__ import annotations

import pytest

from appdeck.auth import AuthError
from appdeck.auth.ratelimit import RateLimiter
from appdeck.auth.throttle import FailureThrottle
from appdeck.common.identity import Principal
from appdeck.transport.guard import Guard, HttpError, rate_key

ALICE = Principal("acme", "alice", kind="oauth", token_id="jti-1")


class Authenticator:
    """Any spelling of ``Bearer good`` is ALICE's token; anything else is refused."""

    def __init__(self) -> None:
        self.calls = 0

    async def authenticate(self, authorization: str | None) -> Principal:
        self.calls += 1
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and token.strip() == "good":
            return ALICE
        raise AuthError("bad token")

    def challenge(self, error: AuthError | None = None) -> str:
        return "Bearer"


def test_the_rate_key_is_the_token_id_else_the_user() -> None:
    assert rate_key(ALICE) == "jti-1"
    assert rate_key(Principal("acme", "alice")) == "user:acme\x00alice"


async def test_spellings_of_one_token_share_one_bucket() -> None:
    guard = Guard(Authenticator(), limiter=RateLimiter(rate=0.001, burst=3))
    spellings = [b"Bearer good", b"bEaReR good", b"bearer    good  "]
    for value in spellings:
        assert await guard.principal({b"authorization": value}, True, "POST") == ALICE
    with pytest.raises(HttpError) as refused:
        await guard.principal({b"authorization": b"BEARER good"}, True, "POST")
    assert refused.value.http_status == 429


async def test_a_blocked_address_is_refused_before_its_token_is_looked_at() -> None:
    auth = Authenticator()
    now = [0.0]
    failures = FailureThrottle(free=2, window=60, clock=lambda: now[0])
    guard = Guard(auth, failures=failures)
    for _ in range(3):
        with pytest.raises(HttpError) as denied:
            await guard.principal({b"authorization": b"Bearer bad"}, True, "POST", "10.0.0.1")
        assert denied.value.http_status == 401
    with pytest.raises(HttpError) as blocked:
        await guard.principal({b"authorization": b"Bearer good"}, True, "POST", "10.0.0.1")
    assert blocked.value.http_status == 429
    assert auth.calls == 3  # the fourth was not authenticated at all
    assert await guard.principal({b"authorization": b"Bearer good"}, True, "POST", "10.0.0.2")
    now[0] += 1.5
    assert await guard.principal({b"authorization": b"Bearer good"}, True, "POST", "10.0.0.1")
