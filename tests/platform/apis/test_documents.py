"""OpenAPI documents, pure: what is accepted (the hello fixture's document, YAML as people
write it), every way a hostile document is refused (with our message, the app's text quoted
and cut), operations found by template or concrete path (and never through an escaping
value), one operation resolved with rings and blow-ups cut, the diff between versions, and
results cut to a size without ever breaking the JSON."""

from __future__ import annotations

import copy
import importlib.util
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from appdeck.common.errors import InvalidArgument
from appdeck.platform.apis import documents
from appdeck.platform.apis.documents import CUT, Operation

HELLO = Path(__file__).resolve().parents[2] / "fixtures" / "apps" / "hello" / "app.py"


def hello() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("hello_app", HELLO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return copy.deepcopy(module.OPENAPI)


def minimal(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "paths": {"/a": {"get": {"responses": {"200": {"description": "ok"}}}}},
    }
    doc.update(extra)
    return doc


def raw(doc: Any) -> bytes:
    return json.dumps(doc).encode()


# -- what is accepted -----------------------------------------------------------------------


def test_the_hello_fixtures_document_loads_and_validates() -> None:
    loaded = documents.load(raw(hello()))
    assert (loaded.openapi_version, loaded.title, loaded.api_version) == ("3.1.0", "hello", "v1")
    assert documents.first_error(loaded.document) is None
    keys = [op.key for op in documents.operations(loaded.document)]
    assert len(keys) == 10
    assert "GET /items/{item_id}" in keys
    assert "POST /echo" in keys
    assert loaded.digest == documents.digest(loaded.canonical)
    assert json.loads(loaded.canonical) == loaded.document


def test_the_canonical_form_ignores_key_order_and_spacing() -> None:
    doc = hello()
    again = json.loads(json.dumps(doc, indent=4), object_pairs_hook=lambda p: dict(reversed(p)))
    assert documents.load(raw(doc)).digest == documents.load(json.dumps(again).encode()).digest


def test_yaml_keeps_dates_as_written_and_status_codes_as_strings() -> None:
    text = (
        "openapi: 3.0.3\n"
        "info: {title: Shop, version: 2024-01-01}\n"
        "paths:\n"
        "  /a:\n"
        "    get:\n"
        "      responses:\n"
        "        200: {description: ok}\n"
    )
    loaded = documents.load(text.encode(), kind="yaml")
    assert loaded.api_version == "2024-01-01"
    assert "200" in loaded.document["paths"]["/a"]["get"]["responses"]
    assert documents.first_error(loaded.document) is None


def test_a_json_document_is_told_from_yaml_by_its_first_character() -> None:
    assert documents.parse(b'  {"openapi": "3.0.3"}')["openapi"] == "3.0.3"
    assert documents.parse(b"openapi: 3.0.3\n")["openapi"] == "3.0.3"
    assert documents.parse(b"\xef\xbb\xbf" + raw(minimal()))["openapi"] == "3.0.3"  # a BOM


# -- what is refused ------------------------------------------------------------------------

LAUGHS = b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + b"".join(
    f"{chr(98 + n)}: &{chr(98 + n)} [{','.join(['*' + chr(97 + n)] * 9)}]\n".encode()
    for n in range(8)
)


def _paths(count: int, methods: tuple[str, ...] = ("get",)) -> dict[str, Any]:
    op = {"responses": {"200": {"description": "ok"}}}
    return {f"/p{n}": dict.fromkeys(methods, op) for n in range(count)}


REFUSED: list[tuple[bytes, str]] = [
    (LAUGHS, "anchors and aliases are not accepted"),
    (b"openapi: 3.0.3\nx: &x 1\n", "anchors and aliases are not accepted"),
    (b'{"openapi": "3.0.3", "x": NaN}', "NaN"),
    (b'{"openapi": "3.0.3", "x": -Infinity}', "-Infinity"),
    (b"openapi: 3.0.3\nx: .nan\n", "not a finite number"),
    (b'{"openapi": "3.0.3",\0 "x": 1}', "NUL byte"),
    (b'{"openapi": "3.0.3", "x": "a\\u0000b"}', "NUL character"),
    (b'{"openapi": "3.0.3", "\\u0000": 1}', "NUL character"),
    (b'{"openapi": "3.0.3", "x": "\\ud800"}', "lone surrogate"),
    (b'{"openapi": "3.0.3", "x": ' + b"[" * 65 + b"]" * 65 + b"}", "deeper than 64"),
    (b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deeper than 64"),
    (b"openapi: 3.0.3\nx: " + b"[" * 70 + b"]" * 70 + b"\n", "deeper than 64"),
    (b"x" * (2 * 1024 * 1024 + 1), "larger than 2 MiB"),
    (b'{"openapi": "3.0.3", "x": "\xff"}', "not UTF-8"),
    (b'{"openapi": "3.0.3", "x": 1' + b"1" * 5000 + b"}", "number too long"),
    (b'{"openapi": "3.0.3", "x": }', "not valid JSON (line 1, column 27)"),
    (b"openapi: 3.0.3\nx: [\n", "not valid YAML (line 3"),
    (b"openapi: 3.0.3\n---\nopenapi: 3.0.3\n", "not valid YAML"),
    (b"openapi: 3.0.3\nx: !!binary aGVsbG8=\n", "not JSON data (bytes)"),
    (b"openapi: 3.0.3\nx: !!python/object:os.system {}\n", "not valid YAML"),
    (b"openapi: 3.0.3\nyes: 1\n", "is not a string: quote it"),
    (b"- 1\n- 2\n", "not an object"),
    (b'"just a string"', "not an object"),
    (raw({"swagger": "2.0", "info": {}}), "Swagger 2.0 documents are not supported"),
    (raw({"info": {}}), "not an OpenAPI document"),
    (raw({"openapi": "3.2.0"}), "'3.2.0' is not supported: 3.0.x or 3.1.x"),
    (raw({"openapi": 3.1}), "3.0.x or 3.1.x"),
    (raw(minimal(paths=_paths(2001))), "more than 2000 paths"),
    (
        raw(minimal(paths=_paths(1001, ("get", "put", "post", "delete", "patch")))),
        "more than 5000 operations",
    ),
    (raw(minimal(paths={"/" + "a" * 2048: {}})), "longer than 2048"),
    (raw(minimal(paths={"/a": {"$ref": "http://169.254.169.254/latest"}})), "is not local"),
    (raw(minimal(components={"schemas": {"A": {"$ref": "file:///etc/passwd"}}})), "is not local"),
    (raw(minimal(components={"schemas": {"A": {"$ref": "other.yaml#/B"}}})), "is not local"),
    (raw(minimal(components={"schemas": {"A": {"$dynamicRef": "https://x/y"}}})), "is not local"),
    (
        raw(minimal(components={"schemas": {"A": {"$ref": "#/components/schemas/Nope"}}})),
        "points at nothing",
    ),
    (
        raw(
            minimal(
                components={
                    "schemas": {
                        "A": {"$ref": "#/components/schemas/B"},
                        "B": {"$ref": "#/components/schemas/A"},
                    }
                }
            )
        ),
        "form a ring",
    ),
    (
        raw(minimal(components={"schemas": {"A": {"$ref": "#/components/schemas/A"}}})),
        "form a ring",
    ),
    (
        raw(minimal(components={"schemas": {"A": {"$id": "http://evil/", "type": "object"}}})),
        "$id is not accepted",
    ),
]


@pytest.mark.parametrize(("body", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_a_hostile_or_broken_document_is_refused_saying_why(body: bytes, message: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        documents.load(body)
    assert message in refused.value.message
    assert len(refused.value.message) < 600


def test_the_apps_text_in_a_refusal_is_quoted_and_cut() -> None:
    doc = minimal(paths={"/a": {"$ref": "http://x/" + "A" * 10_000}})
    with pytest.raises(InvalidArgument) as refused:
        documents.load(raw(doc))
    assert "'http://x/" + "A" * 191 + "'…" in refused.value.message  # 200 characters
    assert "A" * 192 not in refused.value.message


def test_the_validators_first_error_names_where_and_what() -> None:
    doc = hello()
    doc["paths"]["/items/{item_id}"]["get"]["parameters"][0]["in"] = "nowhere"
    found = documents.first_error(doc)
    assert found is not None
    where, what = found
    assert where == "/paths/~1items~1{item_id}/get/parameters/0/in"
    assert "'nowhere' is not one of" in what
    error = documents.invalid(where, "x" * 5000)
    assert "x" * 201 not in error.message
    assert error.message.startswith("the document is not valid OpenAPI at ")


def test_a_document_missing_what_openapi_requires_is_reported() -> None:
    doc = minimal()
    del doc["info"]
    assert documents.first_error(doc) is not None
    doc = minimal(paths={"/a": {"get": {"responses": "many"}}})
    found = documents.first_error(doc)
    assert found is not None
    assert found[0].startswith("/paths/~1a/get")


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "{url}"},
        {"$ref": "{url}#/a"},
        {"type": "object", "properties": {"a": {"$ref": "{url}"}}},
        {"$schema": "{url}", "type": "object"},
        {"$id": "{url}", "$ref": "#/x"},
        {"$dynamicRef": "{url}"},
    ],
)
def test_the_validator_itself_fetches_nothing(schema: dict[str, Any]) -> None:
    """Behind the checks that refuse such refs first: the validator, given them anyway."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/s.json"
        content = {
            "application/json": {"schema": json.loads(json.dumps(schema).replace("{url}", url))}
        }
        doc = minimal(
            openapi="3.1.0",
            paths={
                "/a": {"get": {"responses": {"200": {"description": "ok", "content": content}}}}
            },
        )
        documents.first_error(doc)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody came


# -- operations -----------------------------------------------------------------------------


def test_an_operation_is_found_by_its_template_or_a_concrete_path() -> None:
    doc = hello()
    item = documents.find_operation(doc, "get", "/items/{item_id}")
    assert item == Operation("GET", "/items/{item_id}", "getItem", "One item")
    assert documents.find_operation(doc, "GET", "/items/5") == item
    assert documents.find_operation(doc, "Get", "/items/abc") == item  # the app says 404
    assert documents.find_operation(doc, "POST", "/items/5") is None
    assert documents.find_operation(doc, "GET", "/items") is None
    assert documents.find_operation(doc, "GET", "/items/5/more") is None
    assert documents.find_operation(doc, "GET", "/nope") is None


@pytest.mark.parametrize(
    "path",
    [
        "/items/..",
        "/items/.",
        "/items/%2e%2e",
        "/items/%2E%2e",
        "/items/..%2f..%2fopenapi.json",
        "/items/a%2Fb",
        "/items/a%5cb",
        "/items/a\\b",
        "/items/",
        "/items//",
    ],
)
def test_a_value_that_would_leave_its_segment_matches_no_template(path: str) -> None:
    assert documents.find_operation(hello(), "GET", path) is None


def test_a_literal_path_wins_over_a_template() -> None:
    op = {"responses": {"200": {"description": "ok"}}}
    doc = minimal(
        paths={
            "/items/{id}": {"get": {**op, "operationId": "one"}},
            "/items/new": {"get": {**op, "operationId": "new"}},
            "/files/{name}.json": {"get": {**op, "operationId": "file"}},
            "/pairs/{a}-{b}": {"get": {**op, "operationId": "pair"}},
            "/both/{a}{b}": {"get": {**op, "operationId": "both"}},
        }
    )
    found = documents.find_operation
    assert found(doc, "GET", "/items/new").operation_id == "new"  # type: ignore[union-attr]
    assert found(doc, "GET", "/items/old").operation_id == "one"  # type: ignore[union-attr]
    assert found(doc, "GET", "/files/x.json").operation_id == "file"  # type: ignore[union-attr]
    assert documents.match_path("/files/{name}.json", "/files/x.json") == {"name": "x"}
    assert documents.match_path("/pairs/{a}-{b}", "/pairs/1-2-3") == {"a": "1", "b": "2-3"}
    assert documents.match_path("/pairs/{a}-{b}", "/pairs/" + "-" * 8000) is not None
    assert documents.match_path("/pairs/{a}-{b}", "/pairs/x" + "y" * 8000) is None
    assert found(doc, "GET", "/both/xy") is None  # adjacent parameters: the template only
    assert found(doc, "GET", "/both/{a}{b}").operation_id == "both"  # type: ignore[union-attr]


def test_a_path_item_given_by_a_ref_has_its_operations() -> None:
    doc = minimal(
        openapi="3.1.0",
        paths={"/a": {"$ref": "#/components/pathItems/A"}},
        components={"pathItems": {"A": {"post": {"responses": {"200": {"description": "ok"}}}}}},
    )
    assert documents.first_error(documents.load(raw(doc)).document) is None
    assert [op.key for op in documents.operations(doc)] == ["POST /a"]


# -- one operation resolved -----------------------------------------------------------------


def test_an_operation_comes_resolved_with_the_paths_parameters_merged() -> None:
    doc = hello()
    doc["paths"]["/items/{item_id}"]["parameters"] = [
        {"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}},
        {"$ref": "#/components/parameters/Trace"},
    ]
    doc["components"]["parameters"] = {
        "Trace": {"name": "trace", "in": "header", "schema": {"type": "string"}}
    }
    op = documents.find_operation(doc, "GET", "/items/{item_id}")
    assert op is not None
    resolved = documents.resolve_operation(doc, op)
    assert (resolved["method"], resolved["path"]) == ("GET", "/items/{item_id}")
    params = {(p["name"], p["in"]): p for p in resolved["parameters"]}
    assert params[("item_id", "path")]["schema"] == {"type": "integer"}  # the operation's wins
    assert params[("trace", "header")]["schema"] == {"type": "string"}
    item = resolved["responses"]["200"]["content"]["application/json"]["schema"]
    assert item["required"] == ["id", "name"]
    assert "$ref" not in json.dumps(resolved)


def test_a_recursive_schema_is_cut_with_a_marker() -> None:
    doc = hello()
    item = doc["components"]["schemas"]["Item"]
    item["properties"]["children"] = {
        "type": "array",
        "items": {"$ref": "#/components/schemas/Item"},
    }
    op = documents.find_operation(doc, "GET", "/items/1")
    assert op is not None
    resolved = documents.resolve_operation(doc, op)
    schema = resolved["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["properties"]["children"]["items"] == {
        CUT: "recursive",
        "ref": "#/components/schemas/Item",
    }


def test_a_schema_that_doubles_at_each_level_stays_bounded() -> None:
    schemas = {
        f"S{n}": {
            "type": "object",
            "properties": {
                "a": {"$ref": f"#/components/schemas/S{n + 1}"},
                "b": {"$ref": f"#/components/schemas/S{n + 1}"},
            },
        }
        for n in range(40)
    }
    schemas["S40"] = {"type": "string"}
    doc = minimal(
        components={"schemas": schemas},
        paths={
            "/a": {
                "get": {
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/S0"}}
                            },
                        }
                    }
                }
            }
        },
    )
    resolved = documents.resolve_operation(doc, Operation("GET", "/a", None, None))
    text = json.dumps(resolved)
    assert '"size"' in text
    assert len(text) < 10 * 1024 * 1024
    assert documents.diff(doc, copy.deepcopy(doc)) == documents.Changes([], [], [])


def test_resolving_an_operation_the_document_lacks_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        documents.resolve_operation(hello(), Operation("DELETE", "/", None, None))


# -- what changed ---------------------------------------------------------------------------


def test_the_diff_names_added_removed_and_changed_operations() -> None:
    old = hello()
    new = copy.deepcopy(old)
    del new["paths"]["/fail"]
    new["paths"]["/more"] = {"get": {"responses": {"200": {"description": "more"}}}}
    new["components"]["schemas"]["Item"]["properties"]["name"]["type"] = "integer"
    changes = documents.diff(old, new)
    assert changes.added == ["GET /more"]
    assert changes.removed == ["GET /fail"]
    assert changes.changed == ["GET /items/{item_id}"]  # through a $ref
    assert documents.diff(None, old).added == sorted(op.key for op in documents.operations(old))


def test_renaming_an_identical_component_changes_no_operation() -> None:
    old = hello()
    new = copy.deepcopy(old)
    new["components"]["schemas"]["Thing"] = new["components"]["schemas"].pop("Item")
    content = new["paths"]["/items/{item_id}"]["get"]["responses"]["200"]["content"]
    content["application/json"]["schema"]["$ref"] = "#/components/schemas/Thing"
    assert documents.diff(old, new) == documents.Changes([], [], [])


def test_mutually_recursive_schemas_diff_the_same_from_any_entry() -> None:
    def doc(order: list[str]) -> dict[str, Any]:
        ref = {"A": "#/components/schemas/A", "B": "#/components/schemas/B"}
        paths = {
            f"/{name.lower()}": {
                "get": {
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {"application/json": {"schema": {"$ref": ref[name]}}},
                        }
                    }
                }
            }
            for name in order
        }
        return minimal(
            paths=paths,
            components={
                "schemas": {
                    "A": {"type": "object", "properties": {"b": {"$ref": ref["B"]}}},
                    "B": {"type": "object", "properties": {"a": {"$ref": ref["A"]}}},
                }
            },
        )

    assert documents.diff(doc(["A", "B"]), doc(["B", "A"])) == documents.Changes([], [], [])
    changed = doc(["B", "A"])
    changed["components"]["schemas"]["B"]["properties"]["n"] = {"type": "integer"}
    assert documents.diff(doc(["A", "B"]), changed).changed == ["GET /a", "GET /b"]


# -- sized for a model ----------------------------------------------------------------------


def test_a_value_that_fits_comes_whole() -> None:
    doc = hello()
    fitted = documents.fit(doc, 200_000, smaller="Ask for less.")
    assert (fitted.value, fitted.truncated, fitted.note) == (doc, False, None)
    assert fitted.chars == documents.size(doc)


@pytest.mark.parametrize("max_chars", [1000, 2000, 5000])
def test_a_value_too_large_is_cut_to_fit_and_says_so(max_chars: int) -> None:
    doc = hello()
    doc["info"]["description"] = "d" * 50_000
    fitted = documents.fit(doc, max_chars, smaller="Ask for one operation.")
    assert fitted.truncated is True
    assert documents.size(fitted.value) <= max_chars
    assert json.loads(json.dumps(fitted.value)) == fitted.value
    assert fitted.note is not None
    assert "Ask for one operation." in fitted.note
    assert str(fitted.chars) in fitted.note


def test_even_a_flat_object_of_many_keys_is_cut_to_fit() -> None:
    wide = {f"key{n}": n for n in range(100_000)}
    fitted = documents.fit(wide, 1000, smaller="")
    assert fitted.truncated
    assert documents.size(fitted.value) <= 1000


def test_a_long_chain_and_a_dense_ring_of_refs_diff_without_recursing() -> None:
    schemas: dict[str, Any] = {
        f"C{n}": {
            "type": "object",
            "properties": {"next": {"$ref": f"#/components/schemas/C{n + 1}"}},
        }
        for n in range(3000)
    }
    schemas["C3000"] = {"type": "string"}
    ring = [f"R{n}" for n in range(30)]
    for name in ring:
        schemas[name] = {
            "type": "object",
            "properties": {o: {"$ref": f"#/components/schemas/{o}"} for o in ring},
        }
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/C0"}}}
    other = {"application/json": {"schema": {"$ref": "#/components/schemas/R0"}}}
    doc = minimal(
        components={"schemas": schemas},
        paths={
            "/chain": {"get": {"responses": {"200": {"description": "ok", "content": content}}}},
            "/ring": {"get": {"responses": {"200": {"description": "ok", "content": other}}}},
        },
    )
    assert documents.diff(doc, copy.deepcopy(doc)) == documents.Changes([], [], [])
    changed = copy.deepcopy(doc)
    changed["components"]["schemas"]["C3000"] = {"type": "integer"}
    changed["components"]["schemas"]["R29"]["description"] = "new"
    assert documents.diff(doc, changed).changed == ["GET /chain", "GET /ring"]
