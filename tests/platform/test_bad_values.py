"""Values that would fail later are refused at once, as invalid_argument naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.common.errors import InvalidArgument
from appdeck.model import specs
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"env": {"PORT": "80"}}, "spec/env/PORT"),
        ({"env": {"DATABASE_URL": "x"}}, "spec/env/DATABASE_URL"),
        ({"env": {"FOO\n": "x"}}, "spec/env/FOO\n"),
        ({"env": {"FOO": "a\x00b"}}, "spec/env/FOO"),
        ({"run_command": "python3\x00 app.py"}, "spec/run_command"),
        ({"health_check": {"path": "/ok\r\nX-Injected: 1"}}, "spec/health_check/path"),
        ({"health_check": {"path": "/ok\n"}}, "spec/health_check/path"),
        ({"health_check": {"path": "/a b"}}, "spec/health_check/path"),
    ],
)
def test_a_spec_value_that_would_fail_later_is_refused_naming_its_field(
    spec: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        specs.validate(spec)
    assert refused.value.details["field"] == field


def test_a_good_health_path_and_env_pass() -> None:
    complete = specs.validate({"health_check": {"path": "/healthz?x=1"}, "env": {"A_1": "v"}})
    assert complete["health_check"]["path"] == "/healthz?x=1"


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


async def test_env_names_with_a_newline_values_with_nul_and_reserved_names_are_refused(
    on: OnFakes,
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    env = on.platform.env
    for values in ({"FOO\n": "x"}, {"FOO": "a\x00b"}, {"HOST": "x"}):
        with pytest.raises(InvalidArgument) as refused:
            await env.set_vars(on.alice, app_id, values, secret=False)
        assert str(refused.value.details["field"]).startswith("values"), values
    with pytest.raises(InvalidArgument):
        await env.import_dotenv(on.alice, app_id, "OK=1\nFOO=a\x00b\n", secret=False)
    assert await env.list_vars(on.alice, app_id) == []


async def test_an_app_name_with_a_trailing_newline_is_refused(on: OnFakes) -> None:
    with pytest.raises(InvalidArgument):
        await on.platform.apps.register(on.alice, "shop\n")
