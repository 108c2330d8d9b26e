"""The API catalogue on the platform (real database, both dialects): discovery from the live
release through a fake ingress (which asserts that only the app's host and the well-known
paths are ever asked for, nothing followed) and from a connected repository; versions and
what changed; a broken document stores nothing; who may do what; the catalogue, one version,
one operation, and results sized for a model."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from appdeck.common.errors import (
    AppDeckError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from appdeck.common.identity import Principal
from appdeck.model import hostnames
from appdeck.platform.apis.catalog import WELL_KNOWN, ApiCatalog
from appdeck.platform.apis.client import AppHttp, AppResponse
from appdeck.storage import Storage
from appdeck.storage.api_documents import ApiDocumentStore
from tests.platform.apis.test_documents import hello
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.platform.repos.gitrepo import bare_repo, git
from tests.support.openapi import slow_to_validate

Answer = AppResponse | AppDeckError


def answer(status: int, body: bytes | str = b"", content_type: str = "application/json") -> AppResponse:  # fmt: skip
    data = body.encode() if isinstance(body, str) else body
    return AppResponse(status, (("content-type", content_type),), data, False, 1.0)


def document(doc: dict[str, Any] | None = None) -> AppResponse:
    return answer(200, json.dumps(doc if doc is not None else hello()))


NO_RELEASE = answer(404, json.dumps({"error": {"status": 404, "code": "no_such_app"}}))


class FakeIngress(AppHttp):
    """The ingress as discovery meets it: one app's answers by path. It asserts what discovery
    must never do: another host, another method, a body, a path other than the well-known
    ones, a larger read or a longer wait than the caps."""

    def __init__(self, host: str, answers: dict[str, Answer] | None = None) -> None:
        super().__init__("127.0.0.1", 9)
        self.host = host
        self.answers = answers or {}
        self.asked: list[str] = []
        self.headers: list[dict[str, str]] = []

    async def request(
        self,
        tenant: str,
        host: str,
        method: str,
        target: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        max_body: int = 256 * 1024,
        timeout_s: float = 10.0,
    ) -> AppResponse:
        assert host == self.host
        assert host.endswith(f"--{tenant}.localhost")  # the app's own tenant's share
        assert (method, body) == ("GET", None)
        assert target in WELL_KNOWN
        assert max_body == 2 * 1024 * 1024 + 1
        assert timeout_s <= 10
        self.asked.append(target)
        self.headers.append(dict(headers))
        found = self.answers.get(target, answer(404, '{"error": "no route"}'))
        if isinstance(found, AppDeckError):
            raise found
        if len(found.body) > max_body:
            return AppResponse(found.status, found.headers, found.body[:max_body], True, 1.0)
        return found


class Rig:
    def __init__(self, on: OnFakes, storage: Storage, app_id: int, http: FakeIngress) -> None:
        self.on = on
        self.storage = storage
        self.app_id = app_id
        self.http = http
        self.steps: list[tuple[str, int, int]] = []
        self.catalog = ApiCatalog(
            on.platform.apps,
            ApiDocumentStore(storage.engine),
            http,
            on.platform.repos,
            on.platform.feed,
        )

    async def report(self, message: str, done: int, total: int) -> None:
        assert 0 < done <= total
        self.steps.append((message, done, total))

    async def discover(self, who: Principal | None = None, **options: Any) -> Any:
        return await self.catalog.discover(
            who or self.on.alice, self.app_id, report=self.report, **options
        )


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> Rig:
    on = await platform_on_fakes(storage, tmp_path)
    app = (await on.platform.apps.register(on.alice, "shop")).app
    http = FakeIngress(hostnames.hostname(app.name, app.tenant_id))
    return Rig(on, storage, app.id, http)


# -- discovery from the live release ----------------------------------------------------------


async def test_a_live_document_becomes_version_one_then_changes_make_new_versions(
    rig: Rig,
) -> None:
    rig.http.answers["/openapi.json"] = document()
    first = await rig.discover()
    assert (first.document.version, first.unchanged) == (1, False)
    assert first.document.source == "live:/openapi.json"
    assert (first.document.title, first.document.api_version) == ("hello", "v1")
    assert first.document.operations == 10
    assert first.document.discovered_by == rig.on.alice.user
    assert "GET /items/{item_id}" in first.changes["added"]
    assert first.changes["counts"] == {"added": 10, "removed": 0, "changed": 0}
    assert [(t.where, t.outcome) for t in first.tried] == [("live GET /openapi.json", "found")]
    assert rig.http.asked == ["/openapi.json"]
    assert [m for m, _, _ in rig.steps][-2:] == ["checking the document", "storing the version"]

    again = await rig.discover()
    assert (again.document.version, again.unchanged) == (1, True)
    assert again.changes["counts"] == {"added": 0, "removed": 0, "changed": 0}

    changed = hello()
    del changed["paths"]["/fail"]
    changed["components"]["schemas"]["Item"]["properties"]["name"]["type"] = "integer"
    rig.http.answers["/openapi.json"] = document(changed)
    second = await rig.discover()
    assert (second.document.version, second.unchanged) == (2, False)
    assert (second.changes["removed"], second.changes["changed"]) == (
        ["GET /fail"],
        ["GET /items/{item_id}"],
    )
    latest = await rig.catalog.latest(rig.on.alice, rig.app_id)
    assert latest.version == 2
    assert latest.document == changed
    assert (await rig.catalog.get(rig.on.alice, rig.app_id, 1)).document == hello()


async def test_the_well_known_paths_are_tried_in_order_until_a_document(rig: Rig) -> None:
    yaml_doc = "openapi: 3.0.3\ninfo: {title: Y, version: '2'}\npaths: {}\n"
    rig.http.answers.update(
        {
            "/openapi.json": answer(200, "<html>app</html>", "text/html"),
            "/openapi.yaml": answer(302, b"", "text/plain"),
            "/swagger.json": answer(200, '{"hello": "world"}'),
            "/.well-known/openapi.json": answer(200, "just text", "text/plain"),
            "/docs/openapi.json": answer(200, yaml_doc, "application/yaml"),
        }
    )
    found = await rig.discover(source="live")
    assert found.document.source == "live:/docs/openapi.json"
    assert found.document.title == "Y"
    assert [(t.where, t.outcome) for t in found.tried] == [
        ("live GET /openapi.json", "200, an HTML page"),
        ("live GET /openapi.yaml", "302 (a redirect: not followed)"),
        ("live GET /swagger.json", "200, not an OpenAPI document"),
        ("live GET /.well-known/openapi.json", "200, neither JSON nor YAML"),
        ("live GET /docs/openapi.json", "found"),
    ]
    assert rig.http.asked == list(WELL_KNOWN)  # nothing else: no redirect followed


async def test_no_live_release_and_no_repository_is_a_failed_precondition_naming_both(
    rig: Rig,
) -> None:
    rig.http.answers["/openapi.json"] = NO_RELEASE
    with pytest.raises(FailedPrecondition) as failed:
        await rig.discover()
    assert "live GET /openapi.json: no live release" in failed.value.message
    assert "repo: no repository connected" in failed.value.message
    assert rig.http.asked == ["/openapi.json"]  # the ingress said: no need to try the rest
    with pytest.raises(NotFound) as missing:
        await rig.catalog.latest(rig.on.alice, rig.app_id)
    assert missing.value.hint == "call discover_apis first"


async def test_an_app_that_does_not_answer_ends_the_live_search(rig: Rig) -> None:
    rig.http.answers["/openapi.json"] = Unavailable("the app did not answer within 10 s")
    with pytest.raises(FailedPrecondition, match="did not answer within 10 s"):
        await rig.discover(source="live")
    assert rig.http.asked == ["/openapi.json"]


async def test_the_apps_key_is_sent_when_the_key_service_gives_one(rig: Rig) -> None:
    class Keys:
        async def test_credential(self, principal: Principal, app_id: int) -> str | None:
            assert app_id == rig.app_id
            return "adk_key_test"

    rig.catalog.use_credentials(Keys())
    rig.http.answers["/openapi.json"] = document()
    await rig.discover()
    assert rig.http.headers[0]["x-api-key"] == "adk_key_test"


# -- broken documents store nothing -----------------------------------------------------------


def _invalid_openapi() -> dict[str, Any]:
    doc = hello()
    doc["paths"]["/items/{item_id}"]["get"]["parameters"][0]["in"] = "nowhere"
    return doc


@pytest.mark.parametrize(
    ("served", "message"),
    [
        (document(_invalid_openapi()), "not valid OpenAPI at '/paths/~1items~1{item_id}/get"),
        (answer(200, '{"openapi": "3.1.0", '), "not valid JSON"),
        (answer(200, "openapi: [", "application/yaml"), "not valid YAML"),
        (document({"swagger": "2.0", "info": {}, "paths": {}}), "Swagger 2.0"),
        (answer(200, b"{" + b" " * (2 * 1024 * 1024 + 10) + b"}"), "larger than 2 MiB"),
        (answer(200, "a: &x 1\nb: *x\nopenapi: 3.0.3\n", "text/yaml"), "anchors and aliases"),
    ],
)
async def test_a_broken_document_is_refused_and_nothing_is_stored(
    rig: Rig, served: AppResponse, message: str
) -> None:
    rig.http.answers["/openapi.json"] = served
    with pytest.raises(InvalidArgument) as refused:
        await rig.discover()
    assert message in refused.value.message
    with pytest.raises(NotFound):
        await rig.catalog.latest(rig.on.alice, rig.app_id)
    assert await rig.catalog.list(rig.on.alice, offset=0, limit=10) == []


async def test_a_broken_new_version_leaves_the_last_good_one(rig: Rig) -> None:
    rig.http.answers["/openapi.json"] = document()
    await rig.discover()
    rig.http.answers["/openapi.json"] = document(_invalid_openapi())
    with pytest.raises(InvalidArgument):
        await rig.discover()
    latest = await rig.catalog.latest(rig.on.alice, rig.app_id)
    assert latest.version == 1
    assert latest.document == hello()


async def test_a_document_too_slow_to_validate_is_refused(rig: Rig) -> None:
    rig.catalog.validate_timeout_s = 0.05  # it needs over a second of CPU
    rig.http.answers["/openapi.json"] = document(slow_to_validate())
    with pytest.raises(InvalidArgument, match=r"longer than 0\.05 s to validate"):
        await rig.discover()
    with pytest.raises(NotFound):
        await rig.catalog.latest(rig.on.alice, rig.app_id)


async def test_a_document_the_validator_runs_out_of_memory_on_is_refused(rig: Rig) -> None:
    rig.catalog.validate_memory = 4 << 20  # below what the validator's process maps already
    rig.http.answers["/openapi.json"] = document()
    with pytest.raises(InvalidArgument, match="too large or complex to validate"):
        await rig.discover()
    with pytest.raises(NotFound):
        await rig.catalog.latest(rig.on.alice, rig.app_id)


# -- discovery from the repository ------------------------------------------------------------


async def test_a_document_at_the_top_of_the_connected_repository_is_found(rig: Rig) -> None:
    repo = bare_repo(rig.on.source.parent)
    text = "openapi: 3.0.3\ninfo: {title: From the repo, version: '3'}\npaths: {}\n"
    sha = repo.commit({"app.py": "print('hi')\n", "openapi.yml": text}, "first")
    await rig.on.platform.repos.connect(rig.on.alice, rig.app_id, str(repo.bare))
    rig.http.answers["/openapi.json"] = NO_RELEASE
    found = await rig.discover()  # auto: live first, then the repository
    assert found.document.source == f"repo:openapi.yml@{sha[:12]}"
    assert found.document.title == "From the repo"
    assert [(t.where, t.outcome) for t in found.tried] == [
        ("live GET /openapi.json", "no live release"),
        ("repo openapi.yaml", "absent"),
        ("repo openapi.yml", "found"),
    ]
    only_repo = await rig.discover(source="repo")
    assert only_repo.unchanged is True
    assert rig.http.asked == ["/openapi.json"]  # source repo never asks the app


async def test_a_link_in_the_repository_is_never_followed(rig: Rig) -> None:
    repo = bare_repo(rig.on.source.parent)
    repo.commit({"real.yaml": "openapi: 3.0.3\n", "openapi.json": json.dumps(hello())}, "first")
    os.symlink("real.yaml", repo.work / "openapi.yaml")
    git("add", "-A", cwd=repo.work)
    git("commit", "-q", "-m", "a link", cwd=repo.work)
    git("push", "-q", "origin", "main:main", cwd=repo.work)
    await rig.on.platform.repos.connect(rig.on.alice, rig.app_id, str(repo.bare))
    found = await rig.discover(source="repo")
    assert [(t.where, t.outcome) for t in found.tried] == [
        ("repo openapi.yaml", "a link: not read"),
        ("repo openapi.yml", "absent"),
        ("repo openapi.json", "found"),
    ]
    assert found.document.title == "hello"


async def test_a_repository_without_a_document_or_none_at_all_is_a_failed_precondition(
    rig: Rig,
) -> None:
    with pytest.raises(FailedPrecondition, match="no connected repository"):
        await rig.discover(source="repo")
    repo = bare_repo(rig.on.source.parent)
    repo.commit({"app.py": "print('hi')\n"}, "first")
    await rig.on.platform.repos.connect(rig.on.alice, rig.app_id, str(repo.bare))
    with pytest.raises(FailedPrecondition) as failed:
        await rig.discover(source="repo")
    assert "repo openapi.json: absent" in failed.value.message


# -- who may ----------------------------------------------------------------------------------


async def test_roles_decide_who_discovers_and_who_reads(rig: Rig) -> None:
    on, catalog = rig.on, rig.catalog
    rig.http.answers["/openapi.json"] = document()
    with pytest.raises(NotFound):
        await rig.discover(on.bob)  # no role: the app does not exist for bob
    with pytest.raises(NotFound):
        await catalog.latest(on.bob, rig.app_id)
    assert await catalog.list(on.bob, offset=0, limit=10) == []
    with pytest.raises(NotFound):
        await catalog.list(on.bob, app_id=rig.app_id, offset=0, limit=10)
    await rig.discover()
    await on.platform.apps.grant(on.alice, rig.app_id, "bob", "viewer")
    with pytest.raises(PermissionDenied, match="developer"):
        await rig.discover(on.bob)
    assert (await catalog.latest(on.bob, rig.app_id)).version == 1
    [listed] = await catalog.list(on.bob, offset=0, limit=10)
    assert (listed.api_id, listed.app_name) == (f"api_{rig.app_id}", "shop")
    await on.platform.apps.grant(on.alice, rig.app_id, "bob", "developer")
    assert (await rig.discover(on.bob)).unchanged is True
    for call in (
        rig.discover(on.eve),
        catalog.latest(on.eve, rig.app_id),
        catalog.schema(on.eve, rig.app_id),
    ):
        with pytest.raises(NotFound):
            await call
    assert await catalog.list(on.eve, offset=0, limit=10) == []


# -- the catalogue, a version, one operation --------------------------------------------------


async def test_the_catalogue_lists_the_latest_version_of_each_app_with_filters(rig: Rig) -> None:
    on = rig.on
    rig.http.answers["/openapi.json"] = document()
    await rig.discover()
    blog = (await on.platform.apps.register(on.alice, "blog")).app.id
    blog_http = FakeIngress(hostnames.hostname("blog", "acme"))
    other = hello()
    other["info"]["title"] = "Blog API"
    blog_http.answers["/openapi.json"] = document(other)
    blog_rig = Rig(on, rig.storage, blog, blog_http)
    await blog_rig.discover()
    listed = await rig.catalog.list(on.alice, offset=0, limit=10)
    assert [(s.app_id, s.title, s.version, s.operations) for s in listed] == [
        (rig.app_id, "hello", 1, 10),
        (blog, "Blog API", 1, 10),
    ]
    assert listed[0].source == "live:/openapi.json"
    assert listed[0].openapi_version == "3.1.0"
    titled = await rig.catalog.list(on.alice, title_contains="BLOG", offset=0, limit=10)
    assert [s.app_id for s in titled] == [blog]
    one = await rig.catalog.list(on.alice, app_id=rig.app_id, offset=0, limit=10)
    assert [s.app_id for s in one] == [rig.app_id]
    assert [s.app_id for s in await rig.catalog.list(on.alice, offset=1, limit=5)] == [blog]


async def test_an_unknown_version_names_the_ones_kept(rig: Rig) -> None:
    rig.http.answers["/openapi.json"] = document()
    await rig.discover()
    with pytest.raises(NotFound) as missing:
        await rig.catalog.get(rig.on.alice, rig.app_id, 7)
    assert missing.value.hint == "versions 1 to 1 are kept"


async def test_the_schema_is_the_whole_document_or_one_resolved_operation(rig: Rig) -> None:
    catalog, alice = rig.catalog, rig.on.alice
    rig.http.answers["/openapi.json"] = document()
    await rig.discover()
    whole = await catalog.schema(alice, rig.app_id, max_chars=200_000)
    assert (whole.operation, whole.truncated, whole.note) == (None, False, None)
    assert whole.content == hello()
    one = await catalog.schema(alice, rig.app_id, path="/items/42", method="get")
    assert one.operation is not None
    assert one.operation.key == "GET /items/{item_id}"
    assert one.content["parameters"][0]["name"] == "item_id"
    schema = one.content["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["id", "name"]  # the $ref resolved
    pinned = await catalog.schema(alice, rig.app_id, version=1, path="/echo", method="POST")
    assert "requestBody" in pinned.content
    cut = await catalog.schema(alice, rig.app_id, max_chars=1000)
    assert cut.truncated is True
    assert cut.note is not None
    assert "one operation" in cut.note
    assert cut.chars > 1000
    assert len(json.dumps(cut.content)) <= 1000


@pytest.mark.parametrize(
    ("options", "error", "field"),
    [
        ({"path": "/items/1"}, InvalidArgument, "method"),
        ({"method": "GET"}, InvalidArgument, "path"),
        ({"path": "/nope", "method": "GET"}, NotFound, "path"),
        ({"path": "/items/..%2f..%2fopenapi.json", "method": "GET"}, NotFound, "path"),
        ({"path": "/echo", "method": "GET"}, NotFound, "path"),
        ({"max_chars": 999}, InvalidArgument, "max_chars"),
        ({"max_chars": 200_001}, InvalidArgument, "max_chars"),
    ],
)
async def test_a_schema_request_that_cannot_be_answered_says_why(
    rig: Rig, options: dict[str, Any], error: type[AppDeckError], field: str
) -> None:
    rig.http.answers["/openapi.json"] = document()
    await rig.discover()
    with pytest.raises(error) as refused:
        await rig.catalog.schema(rig.on.alice, rig.app_id, **options)
    assert refused.value.details.get("field") == field


async def test_a_document_read_back_is_a_copy_no_caller_can_spoil(rig: Rig) -> None:
    rig.http.answers["/openapi.json"] = document()
    await rig.discover()
    first = await rig.catalog.latest(rig.on.alice, rig.app_id)
    first.document["paths"].clear()
    again = await rig.catalog.latest(rig.on.alice, rig.app_id)
    assert again.document == copy.deepcopy(hello())


async def test_the_changes_listed_are_bounded_and_counted_in_full(rig: Rig) -> None:
    op = {"get": {"responses": {"200": {"description": "ok"}}}}
    paths = {f"/p{n}": op for n in range(150)}
    paths["/a" + "x" * 1500] = op  # sorts first
    doc = {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": paths}
    rig.http.answers["/openapi.json"] = document(doc)
    found = await rig.discover()
    assert found.changes["counts"] == {"added": 151, "removed": 0, "changed": 0}
    assert len(found.changes["added"]) == 100
    assert max(len(k) for k in found.changes["added"]) == 300
    assert found.document.operations == 151
    stored = await rig.catalog.latest(rig.on.alice, rig.app_id)
    assert stored.changes == found.changes


async def test_the_same_document_again_is_not_validated_again(rig: Rig) -> None:
    rig.http.answers["/openapi.json"] = document()
    await rig.discover()
    rig.catalog.validate_timeout_s = 0.01  # the validator would fail now: it is not run
    again = await rig.discover()
    assert (again.unchanged, again.document.version) == (True, 1)
