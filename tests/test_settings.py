"""List settings take the form a person types; a bad value is one InvalidSetting naming it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appdeck.settings import InvalidSetting, load


def test_source_roots_are_separated_by_the_path_separator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPDECK_SOURCE_ROOTS", f"/a{os.pathsep}/srv/{{tenant}}{os.pathsep}")
    assert load().source_roots == [Path("/a"), Path("/srv/{tenant}")]


def test_a_single_source_root_needs_no_separator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPDECK_SOURCE_ROOTS", "/srv/apps")
    assert load().source_roots == [Path("/srv/apps")]


def test_a_json_list_is_still_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPDECK_SOURCE_ROOTS", '["/a", "/b"]')
    monkeypatch.setenv("APPDECK_ALLOWED_HOSTS", '["a.example"]')
    settings = load()
    assert settings.source_roots == [Path("/a"), Path("/b")]
    assert settings.allowed_hosts == ["a.example"]


def test_the_other_list_settings_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPDECK_ALLOWED_HOSTS", "a.example, b.example")
    monkeypatch.setenv("APPDECK_ALLOWED_ORIGINS", "https://a.example,https://b.example:8443")
    monkeypatch.setenv("APPDECK_JWT_ALGORITHMS", "ES256,RS256")
    settings = load()
    assert settings.allowed_hosts == ["a.example", "b.example"]
    assert settings.allowed_origins == ["https://a.example", "https://b.example:8443"]
    assert settings.jwt_algorithms == ["ES256", "RS256"]


def test_an_empty_list_setting_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPDECK_SOURCE_ROOTS", "")
    monkeypatch.setenv("APPDECK_ALLOWED_HOSTS", " ")
    settings = load()
    assert settings.source_roots == []
    assert settings.allowed_hosts == []


def test_python_callers_still_pass_lists() -> None:
    settings = load(source_roots=[Path("/a")], allowed_hosts=["x.example"])
    assert settings.source_roots == [Path("/a")]
    assert settings.allowed_hosts == ["x.example"]


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("APPDECK_SOURCE_ROOTS", "[not json", "not a JSON list"),
        ("APPDECK_ALLOWED_ORIGINS", "[1, 2", "not a JSON list"),
        ("APPDECK_JWT_ALGORITHMS", "", "at least 1 item"),
        ("APPDECK_PORT", "eighty", "valid integer"),
        ("APPDECK_LOG_LEVEL", "loud", "'debug'"),
        ("APPDECK_MAX_APPS_PER_TENANT", "0", "greater than or equal to 1"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, reason: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidSetting) as caught:
        load()
    assert caught.value.name == name
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"invalid setting {name}: ")
    assert "\n" not in str(caught.value)


def test_egress_allow_takes_comma_separated_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPDECK_EGRESS_ALLOW", "203.0.113.0/24, fd00::/8")
    assert [str(n) for n in load().egress_allow] == ["203.0.113.0/24", "fd00::/8"]


PG = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


def test_replica_mode_takes_redis_with_postgresql_and_a_shared_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APPDECK_REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("APPDECK_DATABASE_URL", PG)
    monkeypatch.setenv("APPDECK_SECRET_KEY", "s" * 32)
    monkeypatch.setenv("APPDECK_REDIS_PREFIX", "staging-2")
    settings = load()
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.redis_prefix == "staging-2"


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"APPDECK_SECRET_KEY": "s" * 32}, "PostgreSQL"),
        ({"APPDECK_DATABASE_URL": PG}, "APPDECK_SECRET_KEY"),
        (
            {"APPDECK_DATABASE_URL": PG, "APPDECK_SECRET_KEY": "k" * 32, "_URL": "http://x"},
            "redis://",
        ),
    ],
    ids=["sqlite", "no-secret", "not-redis"],
)
def test_replica_mode_refuses_what_replicas_cannot_share(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], reason: str
) -> None:
    monkeypatch.setenv("APPDECK_REDIS_URL", env.pop("_URL", "redis://127.0.0.1:6379/0"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InvalidSetting, match=rf"APPDECK_REDIS_URL: .*{reason}"):
        load()


@pytest.mark.parametrize("bad", ["", "a:b", "a b", "x" * 65, "é"])
def test_a_redis_prefix_is_one_plain_name(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("APPDECK_REDIS_PREFIX", bad)
    with pytest.raises(InvalidSetting, match="APPDECK_REDIS_PREFIX"):
        load()


@pytest.mark.parametrize("bad", ["", "Appdeck", "../escape", "a/b", "ok\n", "x" * 65])
def test_a_sandbox_cgroup_is_one_plain_name(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("APPDECK_SANDBOX_CGROUP", bad)
    with pytest.raises(InvalidSetting, match="APPDECK_SANDBOX_CGROUP"):
        load()


def test_two_servers_on_one_host_can_name_their_own_cgroups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APPDECK_SANDBOX_CGROUP", "appdeck-staging_2")
    assert load().sandbox_cgroup == "appdeck-staging_2"


def test_a_relative_data_dir_is_resolved_once_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 item 5: ``.appdeck`` (the default) made every derived path relative, and the
    per-commit checkout handed to a build was refused as "not absolute"."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("APPDECK_DATA_DIR", raising=False)
    assert load().data_dir == tmp_path.resolve() / ".appdeck"
    assert load(data_dir=Path("rel/dir")).data_dir == tmp_path.resolve() / "rel" / "dir"
    monkeypatch.chdir("/")
    assert load(data_dir=tmp_path / "abs").data_dir == tmp_path / "abs"


def test_acme_settings_are_checked_and_named_when_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPDECK_ACME_DIRECTORY", " https://acme.example.test/dir ")
    monkeypatch.setenv("APPDECK_ACME_EMAIL", "ops@example.test")
    settings = load()
    assert (settings.acme_directory, settings.acme_email) == (
        "https://acme.example.test/dir",
        "ops@example.test",
    )
    assert load(acme_directory="", acme_email="").acme_directory is None
    bad = [
        ("acme_directory", "http://acme.example.test/dir", "APPDECK_ACME_DIRECTORY"),
        ("acme_directory", "https://" + "a" * 3000, "APPDECK_ACME_DIRECTORY"),
        ("acme_email", "ops@example.test\nBcc: x@y.test", "APPDECK_ACME_EMAIL"),
        ("acme_email", "no-at-sign", "APPDECK_ACME_EMAIL"),
        ("acme_orders_per_tenant_hour", 2**63, "APPDECK_ACME_ORDERS_PER_TENANT_HOUR"),
        ("acme_names_per_app", 0, "APPDECK_ACME_NAMES_PER_APP"),
        ("acme_retry_seconds", -1, "APPDECK_ACME_RETRY_SECONDS"),
    ]
    for field, value, variable in bad:
        with pytest.raises(InvalidSetting) as caught:
            load(**{field: value})
        assert caught.value.name == variable


@pytest.mark.parametrize(
    "bad", ["a..b", "Apps.example.com", "example", "apps.example.com.", "-a.b"]
)
def test_the_apps_domain_is_a_lower_case_dns_name(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("APPDECK_APPS_DOMAIN", "apps.example.com")
    assert load().apps_domain == "apps.example.com"
    monkeypatch.setenv("APPDECK_APPS_DOMAIN", bad)
    with pytest.raises(InvalidSetting, match="APPDECK_APPS_DOMAIN"):
        load()
    monkeypatch.setenv("APPDECK_APPS_DOMAIN", "apps.example.com")
    monkeypatch.setenv("APPDECK_DNS_RESOLVER", "10.0.0.1:53; rm -rf /")
    with pytest.raises(InvalidSetting, match="APPDECK_DNS_RESOLVER"):
        load()


@pytest.mark.parametrize("target", ["127.0.0.1:514", "[::1]:5514", "10.0.0.9:65535", "/dev/log"])
def test_the_data_plane_log_takes_a_syslog_address_or_socket_path(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.setenv("APPDECK_DATA_PLANE_LOG", target)
    assert load().data_plane_log == target


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:514 local7",  # a second word would be HAProxy's
        "127.0.0.1:514\n  log-send-hostname",  # a line of configuration of one's own
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "logs:-1",
        "dev/log",  # relative
        "/dev/log#x",
        "/" + "a" * 300,
        "127.0.0.1",
        "logs.example.internal:514",  # a DNS name: every reload would resolve it
        "999.0.0.1:514",
        "[::g]:514",
        "ünïcode:514",
        "x'y:514",
    ],
)
def test_the_data_plane_log_refuses_anything_else(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.setenv("APPDECK_DATA_PLANE_LOG", target)
    with pytest.raises(InvalidSetting, match="APPDECK_DATA_PLANE_LOG"):
        load()


def test_the_data_plane_log_is_off_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPDECK_DATA_PLANE_LOG", raising=False)
    assert load().data_plane_log is None
