"""PKCE verifiers: exactly 43-128 unreserved characters, nothing after them."""

from appdeck.auth.server import pkce

VERIFIER = "a" * 43


def test_a_well_formed_verifier_verifies_against_its_challenge() -> None:
    assert pkce.verify(VERIFIER, pkce.s256(VERIFIER))


def test_a_verifier_with_a_trailing_newline_is_malformed() -> None:
    assert not pkce.well_formed(VERIFIER + "\n")
    assert not pkce.verify(VERIFIER + "\n", pkce.s256(VERIFIER + "\n"))
