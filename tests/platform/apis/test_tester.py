"""ApiTester on a real data plane (HAProxy) in front of the hello fixture app (its request handler, served
in-process), with the document and the key service faked: what is sent, what comes back,
and that nothing but the app's own route is ever reached.

The fixtures check the invariant themselves: after every test, the app saw only requests for
its own hostname, and the trap (another local port, a stand-in for "another host") saw none."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from appdeck.common.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from appdeck.common.identity import Principal
from appdeck.common.tokens import new_secret
from appdeck.ingress.haproxy.plane import HAProxyDataPlane
from appdeck.ingress.routes import Backend
from appdeck.platform.apis.client import AppHttp, AppResponse
from appdeck.platform.apis.tester import (
    ApiAnswer,
    ApiCall,
    ApiTester,
    _decoded,
    _shown_headers,
)
from appdeck.platform.apis.validation import Exchange, ResponseChecker, Verdict, verdict
from appdeck.storage import Storage
from tests.ingress.upstreams import Upstream
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.support.data_plane import haproxy_plane

HELLO = Path(__file__).resolve().parents[2] / "fixtures" / "apps" / "hello" / "app.py"
APP_HOST = "shop--acme.localhost"


def _hello() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hello_app_for_tester", HELLO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hello = _hello()
DOC: dict[str, Any] = copy.deepcopy(hello.OPENAPI)
DOC["paths"]["/slow"] = {"get": {"responses": {"200": {"description": "late"}}}}


class InProcess:
    """The schema check without its child process (test_validation.py tests the child): the
    same :func:`verdict`, a second instead of a second per call."""

    async def check(self, exchange: Exchange) -> Verdict:
        return verdict(exchange)


@dataclass
class Latest:
    document: dict[str, Any]
    version: int = 1


class FakeCatalog:
    """``latest`` as the catalog's contract says: the newest document, or not found."""

    def __init__(self, document: dict[str, Any] | None) -> None:
        self.document = document

    async def latest(self, principal: Principal, app_id: int) -> Latest:
        if self.document is None:
            raise NotFound(f"app {app_id} has no API document", hint="call discover_apis first")
        return Latest(self.document)


class FakeKeys:
    """``test_credential``: a fresh key when the app requires one (every one kept)."""

    def __init__(self) -> None:
        self.required = False
        self.issued: list[str] = []

    async def test_credential(self, principal: Principal, app_id: int) -> str | None:
        if not self.required:
            return None
        key = new_secret("adk_key_", 32)
        self.issued.append(key)
        return key


@dataclass
class Rig:
    on: OnFakes
    tester: ApiTester
    catalog: FakeCatalog
    keys: FakeKeys
    plane: HAProxyDataPlane
    trap: Upstream
    app_id: int
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    """(method, target, headers) of every request the app got."""
    real_checker: ResponseChecker | None = None

    async def call(self, method: str, path: str, **options: Any) -> ApiAnswer:
        return await self.tester.call(self.on.alice, self.app_id, ApiCall(method, path, **options))


def _recording_handler(seen: list[tuple[str, str, dict[str, str]]]) -> type:
    class Recorded(hello.Handler):  # type: ignore[misc, name-defined]
        def _record(self) -> None:
            seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))

        def do_GET(self) -> None:  # noqa: N802
            self._record()
            super().do_GET()

        def do_HEAD(self) -> None:  # noqa: N802
            self._record()
            super().do_GET()  # hello has no HEAD: the GET answer, as many frameworks give

        def do_POST(self) -> None:  # noqa: N802
            self._record()
            super().do_POST()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Recorded


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> AsyncIterator[Rig]:
    on = await platform_on_fakes(storage, tmp_path)
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    seen: list[tuple[str, str, dict[str, str]]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _recording_handler(seen))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    slow = await Upstream("slow").start()
    trap = await Upstream("trap").start()
    try:
        async with haproxy_plane(tmp_path / "plane") as router:
            plane = router.plane
            app = f"127.0.0.1:{server.server_address[1]}"
            plane.table.set("shop--acme", [Backend("r1", 100, [app])])
            plane.table.set("slowpoke--acme", [Backend("r1", 100, [slow.address])])
            assert await plane.synced()
            http = AppHttp("127.0.0.1", plane.port)
            catalog, keys = FakeCatalog(DOC), FakeKeys()
            tester = ApiTester(on.platform.apps, catalog, keys, http)  # type: ignore[arg-type]
            real_checker = tester.checker
            tester.checker = InProcess()  # type: ignore[assignment]
            try:
                yield Rig(on, tester, catalog, keys, plane, trap, app_id, seen, real_checker)
            finally:
                await http.aclose()
    finally:
        await asyncio.gather(slow.stop(), trap.stop())
        server.shutdown()
        thread.join(timeout=5)
        server.server_close()
    assert trap.seen == [], "something other than the app's route was reached"
    assert {headers.get("host") for _, _, headers in seen} <= {APP_HOST}


# -- calls that reach the app -----------------------------------------------------------------


async def test_an_operation_is_called_through_the_ingress_and_checked(rig: Rig) -> None:
    answer = await rig.call("GET", "/items/{item_id}", path_params={"item_id": 5})
    assert answer.status == 200
    assert json.loads(answer.body) == {"id": 5, "name": "item 5"}
    assert (answer.encoding, answer.truncated) == ("utf-8", False)
    assert answer.validation.checked
    assert answer.validation.valid is True
    assert (answer.method, answer.documented, answer.template) == ("GET", "GET", "/items/{item_id}")
    assert answer.target == "/items/5"
    assert dict(answer.sent)["Host"] == APP_HOST
    assert answer.latency_ms > 0
    assert rig.seen == [("GET", "/items/5", rig.seen[0][2])]
    assert rig.seen[0][2]["host"] == APP_HOST


async def test_the_answer_is_checked_in_a_child_process_by_default(rig: Rig) -> None:
    assert rig.real_checker is not None
    rig.tester.checker = rig.real_checker
    answer = await rig.call("GET", "/broken")
    assert answer.validation.valid is False
    assert answer.validation.errors == ("body/count: 'many' is not of type 'integer'",)


async def test_a_concrete_path_is_called_like_its_template(rig: Rig) -> None:
    answer = await rig.call("GET", "/items/7", query={"x": "1"})
    assert answer.status == 200
    assert answer.target == "/items/7?x=1"
    assert answer.template == "/items/{item_id}"


async def test_a_response_that_breaks_its_schema_is_an_answer_with_valid_false(rig: Rig) -> None:
    answer = await rig.call("GET", "/broken")
    assert answer.status == 200
    assert answer.validation.valid is False
    assert answer.validation.errors == ("body/count: 'many' is not of type 'integer'",)


async def test_an_app_error_is_an_answer_not_a_failure(rig: Rig) -> None:
    answer = await rig.call("GET", "/fail")
    assert answer.status == 500
    assert answer.validation.valid is True  # the document says GET /fail answers 500


async def test_a_json_body_is_sent_with_its_content_type(rig: Rig) -> None:
    answer = await rig.call("POST", "/echo", body={"a": [1, "é"]})
    assert answer.status == 200
    assert json.loads(answer.body) == {"echo": {"a": [1, "é"]}}
    assert answer.sent_bytes == len('{"a":[1,"é"]}'.encode())
    assert rig.seen[0][2]["content-type"] == "application/json"
    assert answer.validation.valid is True


async def test_a_head_tests_the_get_operation_and_compares_only_the_status(rig: Rig) -> None:
    answer = await rig.call("HEAD", "/items/{item_id}", path_params={"item_id": 1})
    assert answer.status == 200
    assert (answer.method, answer.documented) == ("HEAD", "GET")
    assert answer.body == ""
    assert answer.validation.valid is True
    assert answer.validation.note is not None


async def test_a_big_body_is_cut_at_max_body_bytes_and_said_so(rig: Rig) -> None:
    answer = await rig.call("GET", "/big", query={"kb": 512}, max_body_bytes=1024)
    assert answer.status == 200
    assert answer.truncated is True
    assert answer.body_bytes == 1024
    assert len(answer.body) == 1024
    assert answer.validation.checked
    assert answer.validation.note is not None
    assert "max_body_bytes" in answer.validation.note


async def test_a_non_ascii_path_param_is_percent_encoded(rig: Rig) -> None:
    answer = await rig.call("GET", "/items/{item_id}", path_params={"item_id": "é"})
    assert answer.status == 404
    assert rig.seen[-1][1] == "/items/%C3%A9"


def test_the_answers_headers_are_capped_in_number_and_size() -> None:
    many = tuple((f"x-{n}", "v" * (2000 if n == 3 else 1)) for n in range(60))
    shown, cut = _shown_headers(AppResponse(200, many, b"", False, 1.0))
    assert cut is True
    assert len(shown) == 50
    assert len(shown[3][1]) == 1024
    assert _shown_headers(AppResponse(200, many[:2], b"", False, 1.0)) == (many[:2], False)


def test_a_body_is_text_when_it_is_utf8_else_base64() -> None:
    assert _decoded("é".encode(), truncated=False) == ("é", "utf-8")
    assert _decoded("aé".encode()[:2], truncated=True) == ("a", "utf-8")  # cut inside é
    assert _decoded(b"\xff\x00", truncated=False) == ("/wA=", "base64")


async def test_headers_are_sent_as_given_and_credentials_masked_in_the_answer(rig: Rig) -> None:
    answer = await rig.call(
        "GET", "/headers", headers={"Authorization": "Bearer s3cret", "X-Trace": "t-1"}
    )
    echoed = json.loads(answer.body)["headers"]
    assert echoed["authorization"] == "Bearer s3cret"
    assert echoed["x-trace"] == "t-1"
    assert echoed["host"] == APP_HOST
    assert echoed["accept-encoding"] == "identity"  # the body's size is the wire's
    sent = dict(answer.sent)
    assert sent["Authorization"] == "Bearer …"
    assert "s3cret" not in json.dumps(answer.sent)
    assert answer.key == "none"


async def test_when_the_app_requires_a_key_a_fresh_one_is_sent_and_never_shown(rig: Rig) -> None:
    rig.keys.required = True
    answer = await rig.call("GET", "/headers")
    assert answer.key == "injected"
    [key] = rig.keys.issued
    assert rig.seen[-1][2]["x-api-key"] == key
    assert key not in json.dumps(answer.sent)
    assert dict(answer.sent)["X-API-Key"] == key[:12] + "…"

    mine = await rig.call("GET", "/healthz", api_key="adk_key_mine_000000000000")
    assert mine.key == "given"
    assert rig.seen[-1][2]["x-api-key"] == "adk_key_mine_000000000000"
    none = await rig.call("GET", "/healthz", without_key=True)
    assert none.key == "none"
    assert "x-api-key" not in rig.seen[-1][2]
    assert len(rig.keys.issued) == 1


# -- SSRF: only the app's own route -----------------------------------------------------------


async def test_a_redirect_off_the_app_is_returned_and_never_followed(rig: Rig) -> None:
    for to in ("http://169.254.169.254/latest/meta-data/", f"http://{rig.trap.address}/"):
        answer = await rig.call("GET", "/redirect", query={"to": to})
        assert answer.status == 302
        assert answer.location == to
        assert answer.redirect
    assert [m for m, _, _ in rig.seen] == ["GET", "GET"]


ESCAPES: list[tuple[str, dict[str, Any]]] = [
    ("http://other/", {}),
    ("//other/", {}),
    ("http://169.254.169.254/latest/meta-data/", {}),
    ("//169.254.169.254/latest/meta-data/", {}),
    ("http://127.0.0.1:22/", {}),
    ("/healthz", {"headers": {"Host": "169.254.169.254"}}),
    ("/healthz", {"headers": {"Host": "127.0.0.1:5432"}}),
    ("/healthz", {"headers": {"X-Forwarded-Host": "other"}}),
    ("/items/{item_id}", {"path_params": {"item_id": "../../admin"}}),
    ("/items/{item_id}", {"path_params": {"item_id": "..%2f..%2fopenapi.json"}}),
    ("/items/{item_id}", {"path_params": {"item_id": "%2e%2e"}}),
    ("/items/..%2f..%2fopenapi.json", {}),
    ("/items/%2e%2e", {}),
    ("/items/..", {}),
    ("/items/5/../../openapi.json", {}),
    ("/healthz?x=1", {}),
    ("/healthz", {"api_key": "adk_key_x\r\nHost: evil"}),
]


async def test_every_escape_from_the_route_is_refused_before_anything_is_sent(rig: Rig) -> None:
    for path, options in ESCAPES:
        with pytest.raises((InvalidArgument, NotFound)):
            await rig.call("GET", path, **options)
    assert rig.seen == []


async def test_a_url_in_a_path_param_is_only_a_segment_on_the_app(rig: Rig) -> None:
    answer = await rig.call(
        "GET", "/items/{item_id}", path_params={"item_id": "http://169.254.169.254/"}
    )
    assert answer.status == 404  # the app's own answer: no such item
    assert rig.seen[-1][1] == "/items/http%3A%2F%2F169.254.169.254%2F"


async def test_a_document_that_points_off_the_route_is_refused(rig: Rig) -> None:
    doc = copy.deepcopy(DOC)
    doc["paths"]["/a/../../admin"] = {"get": {"responses": {"200": {"description": "x"}}}}
    doc["paths"]["//169.254.169.254/x"] = {"get": {"responses": {"200": {"description": "x"}}}}
    rig.catalog.document = doc
    for path in ("/a/../../admin", "//169.254.169.254/x"):
        with pytest.raises(InvalidArgument):
            await rig.call("GET", path)
    doc["servers"] = [{"url": "http://169.254.169.254/../.."}]
    with pytest.raises(InvalidArgument):
        await rig.call("GET", "/healthz")
    assert rig.seen == []


async def test_a_documents_server_path_stays_on_the_app(rig: Rig) -> None:
    doc = copy.deepcopy(DOC)
    doc["servers"] = [{"url": "http://169.254.169.254/api"}]
    rig.catalog.document = doc
    answer = await rig.call("GET", "/healthz")
    assert answer.target == "/api/healthz"
    assert answer.status == 404  # hello serves no /api: the app answered, nobody else
    assert rig.seen[-1][1] == "/api/healthz"


# -- refusals -------------------------------------------------------------------------------


async def test_only_a_developer_of_the_app_may_call_it(rig: Rig) -> None:
    with pytest.raises(NotFound):
        await rig.tester.call(rig.on.eve, rig.app_id, ApiCall("GET", "/healthz"))
    with pytest.raises(NotFound):
        await rig.tester.call(rig.on.bob, rig.app_id, ApiCall("GET", "/healthz"))
    await rig.on.platform.apps.grant(rig.on.alice, rig.app_id, "bob", "viewer")
    with pytest.raises(PermissionDenied):
        await rig.tester.call(rig.on.bob, rig.app_id, ApiCall("GET", "/healthz"))
    await rig.on.platform.apps.grant(rig.on.alice, rig.app_id, "bob", "developer")
    answer = await rig.tester.call(rig.on.bob, rig.app_id, ApiCall("GET", "/healthz"))
    assert answer.status == 200


async def test_without_a_discovered_document_it_says_to_discover_first(rig: Rig) -> None:
    rig.catalog.document = None
    with pytest.raises(FailedPrecondition) as refused:
        await rig.call("GET", "/healthz")
    assert refused.value.hint == "call discover_apis first"


async def test_an_operation_the_document_does_not_have_is_not_found(rig: Rig) -> None:
    for method, path in (("GET", "/nope"), ("POST", "/items/{item_id}"), ("DELETE", "/echo")):
        with pytest.raises(NotFound) as refused:
            await rig.call(method, path)
        assert refused.value.hint is not None
        assert "get_api_schema" in refused.value.hint
    assert rig.seen == []


async def test_an_app_without_a_live_release_is_a_failed_precondition(rig: Rig) -> None:
    for state in ("never live", "live once"):
        if state == "never live":
            rig.plane.table.remove("shop--acme")  # the data plane's 404 no_such_app
        else:
            rig.plane.table.set("shop--acme", [Backend("gone", 100, ["127.0.0.1:9"])])
            rig.plane.table.set("shop--acme", [])  # its 503 no_live_release
        assert await rig.plane.synced()
        for method, accept in (("GET", "application/json"), ("GET", "text/html"), ("HEAD", "")):
            headers = {"Accept": accept} if accept else {}
            with pytest.raises(FailedPrecondition, match="no live release"):
                await rig.call(method, "/healthz", headers=headers)
    assert rig.seen == []


async def test_the_apps_own_404_is_its_answer(rig: Rig) -> None:
    for method in ("GET", "HEAD"):
        answer = await rig.call(method, "/items/{item_id}", path_params={"item_id": "x"})
        assert answer.status == 404


async def test_an_app_that_answers_too_late_is_unavailable(rig: Rig) -> None:
    slow = (await rig.on.platform.apps.register(rig.on.alice, "slowpoke")).app.id
    call = ApiCall("GET", "/slow", query={"delay": 5}, timeout_s=0.3)
    with pytest.raises(Unavailable, match=r"did not answer within 0\.3 s"):
        await rig.tester.call(rig.on.alice, slow, call)


async def test_bad_arguments_are_refused_naming_the_field(rig: Rig) -> None:
    for call, named in [
        (ApiCall("TRACE", "/healthz"), "method"),
        (ApiCall("GET", "/healthz", timeout_s=31), "timeout_s"),
        (ApiCall("GET", "/healthz", max_body_bytes=10), "max_body_bytes"),
        (ApiCall("GET", "/healthz", api_key="k", without_key=True), "without_key"),
        (ApiCall("GET", "/healthz", body={"a": 1}), "body"),
        (ApiCall("GET", "/healthz", headers={"Content-Length": "1"}), "headers/Content-Length"),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            await rig.tester.call(rig.on.alice, rig.app_id, call)
        assert refused.value.details["field"] == named
    assert rig.seen == []
