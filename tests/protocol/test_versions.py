from appdeck.protocol import versions


def test_a_supported_version_is_echoed() -> None:
    assert versions.negotiate("2025-11-25") == "2025-11-25"
    assert versions.negotiate("2025-03-26") == "2025-03-26"


def test_an_unknown_version_gets_the_latest() -> None:
    assert versions.negotiate("1999-01-01") == versions.LATEST
    assert versions.negotiate(None) == versions.LATEST


def test_batches_exist_only_in_2025_03_26() -> None:
    assert versions.allows_batches("2025-03-26")
    assert not versions.allows_batches("2025-11-25")
