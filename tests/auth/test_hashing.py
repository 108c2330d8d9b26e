"""The password hashes: a missing user's password is checked against a dummy hash made with
the same parameters as a user's, so the two cost the same. The suite runs with the test-only
fast parameters (tests/conftest.py); the default ones are checked in a process of their own."""

from __future__ import annotations

import os
import subprocess
import sys

from appdeck.auth import hashing


def test_the_dummy_hash_has_the_parameters_of_a_fresh_users_hash() -> None:
    _, hasher, dummy = hashing._hashing()
    assert not hasher.check_needs_rehash(dummy)
    fresh = hashing.hash_password("a password")
    assert fresh.split("$")[:4] == dummy.split("$")[:4]  # argon2id, version, m/t/p


def test_a_missing_user_is_refused_whatever_the_password() -> None:
    assert not hashing.verify_password(None, "appdeck-timing-equaliser")
    assert not hashing.verify_password(None, "")


def test_a_users_password_is_checked() -> None:
    stored = hashing.hash_password("correct horse")
    assert hashing.verify_password(stored, "correct horse")
    assert not hashing.verify_password(stored, "wrong")
    assert not hashing.verify_password("not a hash", "correct horse")


def test_the_suite_hashes_fast_and_says_so() -> None:
    assert os.environ.get(hashing.FAST_FOR_TESTS) == "1"
    assert hashing.fast_for_tests()
    assert hashing.hash_password("x").split("$")[3] == "m=8,t=1,p=1"


def test_without_the_test_setting_passwords_get_argon2ids_defaults_and_so_does_the_dummy() -> None:
    code = """
from appdeck.auth import hashing
fast, hasher, dummy = hashing._hashing()
assert not fast
assert not hashing.fast_for_tests()
fresh = hashing.hash_password("a password")
assert fresh.split("$")[3] == "m=65536,t=3,p=4", fresh
assert fresh.split("$")[:4] == dummy.split("$")[:4] and not hasher.check_needs_rehash(dummy)
assert hashing.verify_password(fresh, "a password")
assert hashing.verify_password(hashing.hash_password("x"), "x")
"""
    env = {k: v for k, v in os.environ.items() if k != hashing.FAST_FOR_TESTS}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_hash_made_with_either_parameters_verifies_under_the_other() -> None:
    fast = hashing.hash_password("pw")
    code = f"""
from appdeck.auth import hashing
assert hashing.verify_password({fast!r}, "pw")
print(hashing.hash_password("pw"))
"""
    env = {k: v for k, v in os.environ.items() if k != hashing.FAST_FOR_TESTS}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert hashing.verify_password(done.stdout.strip(), "pw")
