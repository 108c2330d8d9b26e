"""The password hashes: a missing user's password is checked against a dummy hash made with
the same parameters as a user's, so the two cost the same."""

from __future__ import annotations

from appdeck.auth import hashing


def test_the_dummy_hash_has_the_parameters_of_a_fresh_users_hash() -> None:
    assert not hashing._hasher.check_needs_rehash(hashing._DUMMY)
    fresh = hashing.hash_password("a password")
    assert fresh.split("$")[:4] == hashing._DUMMY.split("$")[:4]  # argon2id, version, m/t/p


def test_a_missing_user_is_refused_whatever_the_password() -> None:
    assert not hashing.verify_password(None, "appdeck-timing-equaliser")
    assert not hashing.verify_password(None, "")


def test_a_users_password_is_checked() -> None:
    stored = hashing.hash_password("correct horse")
    assert hashing.verify_password(stored, "correct horse")
    assert not hashing.verify_password(stored, "wrong")
    assert not hashing.verify_password("not a hash", "correct horse")
