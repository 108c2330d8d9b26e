"""The real tool registry, every tool and action, driven with generated arguments over the
real platform services (runtime, router and logs in memory: tests/platform/on_fakes.py).

- A call that fits the validated schema gets a result or a *domain* error, never
  ``internal``; every result, error results included, fits the tool's outputSchema.
- A call that does not fit gets ``invalid_argument`` naming the field (``details.field``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from appdeck.common.identity import Principal
from appdeck.platform.tables.catalog import Column
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import Registry, ToolDef
from appdeck.protocol.tools_feature import run_tool
from appdeck.storage import Storage
from appdeck.tools import register_all
from tests.platform.apis.test_documents import hello
from tests.platform.on_fakes import OnFakes, platform_on_fakes, shop_spec
from tests.platform.repos.gitrepo import bare_repo
from tests.support.schemas import values


@dataclass
class Rig:
    fakes: OnFakes
    registry: Registry
    picks: dict[str, Any]

    def tool(self, name: str) -> ToolDef:
        return self.registry.tools[name]

    async def call(self, tool: ToolDef, args: dict[str, Any], who: Principal) -> dict[str, Any]:
        ctx = ToolContext(
            principal=who,
            session=None,
            request_id=1,
            progress_token=None,
            channel=None,
            outbox=None,  # type: ignore[arg-type]
            requests=None,  # type: ignore[arg-type]
            tasks=None,  # type: ignore[arg-type]
        )
        result = await run_tool(tool, args, ctx)
        assert tool.output_schema is not None
        Draft202012Validator(tool.output_schema).validate(result["structuredContent"])
        return result


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> AsyncIterator[Rig]:
    fakes = await platform_on_fakes(storage, tmp_path)
    p, alice = fakes.platform, fakes.alice
    shop = (await p.apps.register(alice, "shop", shop_spec(fakes.source))).app.id
    spare = (await p.apps.register(alice, "spare", shop_spec(fakes.source))).app.id
    theirs = (await p.apps.register(fakes.eve, "theirs")).app.id
    for _ in range(2):
        await p.deployments.deploy(alice, shop, wait_s=None)
    await p.tables.create(alice, shop, "notes", [Column("title", "text")], fulltext=["title"])
    repo = bare_repo(fakes.source.parent)
    repo.commit({"app.py": "print('hi')\n"}, "first")
    repo.commit({"openapi.json": json.dumps(hello())}, "its API")  # a catalogue to read
    await p.repos.connect(alice, shop, str(repo.bare))
    await p.apis.catalog.discover(alice, shop, source="repo")
    key = (await p.apis.keys.create(alice, shop, name="k")).key.row.id
    registry = Registry()
    register_all(registry, p)
    picks = {
        "app_id": st.sampled_from([shop, shop, spare, theirs, 987654]),
        "number": st.integers(1, 4),
        "user": st.sampled_from(["bob", "alice", "eve", "nobody"]),
        "confirm": st.just(False),  # keeps the apps: a confirmed delete would end the story
        "source_path": st.sampled_from([str(fakes.source), "/nowhere", "relative"]),
        "wait_seconds": st.sampled_from([0, 0.5, 5]),
        "table": st.sampled_from(["notes", "nope"]),
        "url": st.sampled_from([str(repo.bare), "ext::sh", "/nowhere", "https://h/r.git\n"]),
        "branch": st.sampled_from(["main", "nope"]),
        # manage_ci runs this in the checkout (ShellRunner): never a random string
        "test_command": st.sampled_from(["true", "exit 3", "echo hi"]),
        "commit": st.sampled_from(["0" * 40, "g" * 40]),
        # the API catalogue: operations of the discovered document and hostile paths; the
        # rig's principals hold no scopes, and test_api steps a non-GET up to apis:write
        "path": st.sampled_from(
            [
                "/",
                "/items/{item_id}",
                "/items/5",
                "/nope",
                "/items/..%2fx",
                "http://169.254.169.254/",
            ]
        ),
        "method": st.sampled_from(["GET", "HEAD"]),
        "version": st.integers(1, 3),
        "body": st.none() | st.just({"a": [1]}),
        "key_id": st.sampled_from([key, key, "key_nope", "x" * 40]),
    }
    yield Rig(fakes, registry, picks)
    await p.deployments.settle()
    assert fakes.databases is not None
    await fakes.databases.close()


def _schema(tool: ToolDef) -> dict[str, Any]:
    return tool.validation_schema or tool.input_schema


def _required(tool: ToolDef, args: dict[str, Any]) -> list[str]:
    schema = _schema(tool)
    for branch in schema.get("oneOf", []):
        if branch["properties"]["action"]["const"] == args.get("action"):
            return list(branch["required"])
    return list(schema.get("required", []))


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, (int, float)):
        return "seven"
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return {"not": "a list"}
    if isinstance(value, dict):
        return ["not", "an", "object"]
    return []


NAMES = (
    "register_app",
    "list_my_apps",
    "get_app_url",
    "manage_app",
    "set_app_spec",
    "env_vars",
    "deploy_app",
    "rollback_deploy",
    "preflight_check",
    "list_deployments",
    "restart_app",
    "tail_deploy_logs",
    "manage_table",
    "alter_table",
    "records",
    "search_table",
    "connect_repo",
    "manage_ci",
    "import_and_deploy",
    "manage_oauth_client",
    "whats_next",
    "discover_apis",
    "list_apis",
    "get_api_schema",
    "test_api",
    "manage_api_key",
)
TOOL_NAMES = st.sampled_from(NAMES)
SLOW = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)


async def test_every_tool_is_in_the_property_tests(rig: Rig) -> None:
    assert set(rig.registry.tools) == set(NAMES)


@SLOW
@given(data=st.data())
async def test_every_schema_valid_call_gets_a_result_or_a_domain_error(
    rig: Rig, data: st.DataObject
) -> None:
    tool = rig.tool(data.draw(TOOL_NAMES))
    args = data.draw(values(_schema(tool), rig.picks), label="arguments")
    who = data.draw(st.sampled_from([rig.fakes.alice, rig.fakes.alice, rig.fakes.bob]))
    result = await rig.call(tool, args, who)
    event(f"{tool.name}: {result['structuredContent'].get('error', {}).get('code', 'ok')}")
    if result.get("isError"):
        error = result["structuredContent"]["error"]
        assert error["code"] != "internal", (tool.name, args, error)
        assert error["code"] != "invalid_argument" or "Invalid arguments" not in error["message"]


@SLOW
@given(data=st.data())
async def test_every_schema_invalid_call_is_invalid_argument_naming_the_field(
    rig: Rig, data: st.DataObject
) -> None:
    tool = rig.tool(data.draw(TOOL_NAMES))
    args = dict(data.draw(values(_schema(tool), rig.picks), label="valid arguments"))
    how = data.draw(st.sampled_from(["drop", "extra", "retype"]))
    if how == "drop":
        required = _required(tool, args)
        assume(required)
        field = data.draw(st.sampled_from(required))
        del args[field]
    elif how == "extra":
        field = "bogus_field"
        args[field] = 1
    else:
        assume(args)
        field = data.draw(st.sampled_from(sorted(args)))
        args[field] = _wrong(args[field])
    assume(not Draft202012Validator(_schema(tool)).is_valid(args))
    result = await rig.call(tool, args, rig.fakes.alice)
    assert result.get("isError") is True
    error = result["structuredContent"]["error"]
    assert error["code"] == "invalid_argument", error
    named = error["details"]["field"]
    assert named == field or named.startswith(f"{field}/"), (how, field, error)


async def test_a_grant_without_user_and_role_names_the_missing_field(rig: Rig) -> None:
    app_id = (await rig.fakes.platform.apps.list_apps(rig.fakes.alice, offset=0, limit=1))[0]
    result = await rig.call(
        rig.tool("manage_app"), {"app_id": app_id.app.id, "action": "grant"}, rig.fakes.alice
    )
    error = result["structuredContent"]["error"]
    assert error["code"] == "invalid_argument"
    assert error["details"]["field"] == "user"
    assert "grant" in error["message"]
