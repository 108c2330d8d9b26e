"""Ceilings and quotas as plain functions: what a spec holds, which limit a refusal names, and
that a change which does not grow what an app holds always passes."""

from __future__ import annotations

from typing import Any

import pytest

from appdeck.common.errors import InvalidArgument, QuotaExceeded
from appdeck.model import specs
from appdeck.model.release import AppSpec, Release
from appdeck.platform import quotas
from appdeck.platform.env import freeze, thaw

LIMITS = quotas.Limits(tenant_memory_mb=4096, tenant_instances=6, tenant_disk_mb=3000)


def _spec(instances: int = 1, memory_mb: int = 512, disk_mb: int = 1024) -> dict[str, Any]:
    return specs.validate(
        {"instances": instances, "resources": {"memory_mb": memory_mb, "disk_mb": disk_mb}}
    )


def test_a_spec_stored_before_disk_mb_existed_holds_the_default_disk() -> None:
    stored = {"instances": 3, "resources": {"memory_mb": 256, "cpus": 1.0, "pids": 256}}
    assert quotas.usage(stored, disk_default=512) == quotas.Usage(768, 3, 512)


def test_the_default_disk_is_the_ceiling_when_it_is_below_one_gib() -> None:
    assert quotas.Limits(max_app_disk_mb=300).default_disk_mb == 300
    assert quotas.Limits(max_app_disk_mb=4096).default_disk_mb == 1024
    assert specs.validate({}, disk_mb=300)["resources"]["disk_mb"] == 300


def test_a_ceiling_is_inclusive_and_the_refusal_names_field_and_setting() -> None:
    quotas.check_ceilings(_spec(4, 2048, 1024), quotas.Limits())
    with pytest.raises(InvalidArgument) as refused:
        quotas.check_ceilings(_spec(4, 2049), quotas.Limits())
    assert refused.value.details["field"] == "spec/resources/memory_mb"
    assert "APPDECK_MAX_INSTANCE_MEMORY_MB" in refused.value.message


def test_an_app_counts_the_larger_of_its_spec_and_its_running_releases() -> None:
    held = {1: [_spec(1), _spec(4, 512)]}  # spec lowered to 1 after a deploy of 4
    check = quotas.guard(LIMITS, 2, _spec(3))
    with pytest.raises(QuotaExceeded) as refused:
        check(held)
    assert refused.value.details == {
        "quota": "instances",
        "limit": 6,
        "used": 4,
        "requested": 3,
        "setting": "APPDECK_TENANT_INSTANCES",
    }
    quotas.guard(LIMITS, 2, _spec(2))(held)


def test_a_change_that_does_not_grow_the_app_passes_even_over_a_lowered_quota() -> None:
    held = {1: [_spec(4, 1024)], 2: [_spec(2, 1024)]}  # 6 GiB of 4 held
    quotas.guard(LIMITS, 2, _spec(1, 1024))(held)  # shrinks
    quotas.guard(LIMITS, 2, _spec(2, 1024))(held)  # the same
    with pytest.raises(QuotaExceeded, match="memory"):
        quotas.guard(LIMITS, 2, _spec(2, 1100))(held)


def test_a_usage_grows_when_any_of_memory_instances_or_disk_grows() -> None:
    before = quotas.Usage(2048, 2, 1024)
    assert not quotas.grows(quotas.Usage(2048, 2, 1024), before)
    assert not quotas.grows(quotas.Usage(1024, 1, 512), before)
    for grown in (quotas.Usage(2049, 1, 1), quotas.Usage(1, 3, 1), quotas.Usage(1, 1, 1025)):
        assert quotas.grows(grown, before)


def test_disk_counts_once_per_app() -> None:
    held = {1: [_spec(4, 256, 1500)]}
    quotas.guard(LIMITS, 2, _spec(1, 256, 1500))(held)
    with pytest.raises(QuotaExceeded, match="APPDECK_TENANT_DISK_MB"):
        quotas.guard(LIMITS, 2, _spec(1, 256, 1501))(held)


def test_a_build_goes_without_the_secret_names_of_its_frozen_env_unless_ci_secrets() -> None:
    env, secret = thaw(freeze({"TOKEN": "t", "PLAIN": "p"}, ["TOKEN", "GONE"]))
    assert (env, secret) == ({"TOKEN": "t", "PLAIN": "p"}, frozenset({"TOKEN"}))
    release = Release(1, "a", 1, AppSpec(), env, secret_names=secret)
    assert release.build_env == {"PLAIN": "p"}
    shared = Release(1, "a", 1, AppSpec(ci_secrets=True), env, secret_names=secret)
    assert shared.build_env == env
    assert thaw('{"OLD": "v"}') == ({"OLD": "v"}, frozenset())  # frozen before the names


def test_resetting_resources_gives_the_operators_lower_disk_default() -> None:
    defaults = specs.with_disk_default(300)
    reset = specs.merge(_spec(disk_mb=900), {"resources": None}, defaults)
    assert reset["resources"]["disk_mb"] == 300
    assert specs.merge(_spec(), {"resources": None})["resources"]["disk_mb"] == 1024
