"""test_api's request checks (pure): whatever a caller or an app's document says, the target
stays a path inside the operation's own path, and no header can redirect or spoof."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appdeck.common.errors import InvalidArgument
from appdeck.platform.apis import requests as rq


def test_a_template_with_path_params_becomes_an_encoded_target() -> None:
    target = rq.build_target("/items/{item_id}", {}, {"item_id": 5}, {"q": "a b", "n": [1, 2]})
    assert target == "/items/5?q=a%20b&n=1&n=2"


def test_a_concrete_path_keeps_its_values() -> None:
    assert rq.build_target("/items/{item_id}", {"item_id": "7"}, {}, {}) == "/items/7"


@pytest.mark.parametrize(
    "value",
    ["a/b", "a?b", "a#b", "a@b", "a\\b", "100%", "é", "a b", "http://169.254.169.254/"],
)
def test_every_character_of_a_path_param_stays_inside_its_segment(value: str) -> None:
    target = rq.build_target("/items/{item_id}", {}, {"item_id": value}, {})
    assert target.startswith("/items/")
    assert target.count("/") == 2  # one segment: a / in the value is %2F
    assert not any(c in target for c in "?#\\ @")


@pytest.mark.parametrize(
    "value",
    ["..", ".", "../../admin", "..\\..\\admin", "%2e%2e", "%252e%252e", "a/../..", "./x"],
)
def test_a_path_param_that_would_leave_the_path_is_refused(value: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        rq.build_target("/items/{item_id}", {}, {"item_id": value}, {})
    assert refused.value.details["field"] == "path_params/item_id"


@pytest.mark.parametrize(
    "path",
    [
        "http://other/",
        "//other/",
        "http://127.0.0.1:22/",
        "//169.254.169.254/latest/meta-data/",
        "169.254.169.254",
        "items",
        "/items?x=1",
        "/items#frag",
        "/a b",
        "/a\\b",
        "/é",
        "/a\r\nHost: evil",
        "/" + "a" * 3000,
    ],
)
def test_a_path_that_is_a_url_or_not_a_plain_path_is_refused(path: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        rq.check_path(path)
    assert refused.value.details["field"] == "path"


@pytest.mark.parametrize(
    "template", ["/a/../admin", "/a/%2e%2e/admin", "/a/%252E%252E/x", "/./x", "/files/.."]
)
def test_a_document_template_with_dot_segments_is_refused(template: str) -> None:
    with pytest.raises(InvalidArgument):
        rq.build_target(template, {}, {}, {})


def test_a_server_base_path_is_prefixed_and_checked() -> None:
    assert rq.base_path({"servers": [{"url": "/api/v1/"}]}) == "/api/v1"
    assert rq.base_path({"servers": [{"url": "https://api.example.com/v2"}]}) == "/v2"
    assert rq.base_path({"servers": [{"url": "http://169.254.169.254"}]}) == ""
    assert rq.base_path({"servers": [{"url": "{scheme}://x/{base}"}]}) == ""
    assert rq.base_path({}) == ""
    assert rq.build_target("/items", {}, {}, {}, base="/api") == "/api/items"
    with pytest.raises(InvalidArgument):
        rq.build_target("/items", {}, {}, {}, base="/api/../..")
    with pytest.raises(InvalidArgument):
        rq.build_target("/items", {}, {}, {}, base=rq.base_path({"servers": [{"url": "//x"}]}))


def test_missing_unknown_and_conflicting_path_params_are_named() -> None:
    with pytest.raises(InvalidArgument, match="has no value"):
        rq.build_target("/items/{item_id}", {}, {}, {})
    with pytest.raises(InvalidArgument, match="no parameter 'other'"):
        rq.build_target("/items/{item_id}", {}, {"item_id": 1, "other": 2}, {})
    with pytest.raises(InvalidArgument, match="two values"):
        rq.build_target("/items/{item_id}", {"item_id": "1"}, {"item_id": 2}, {})
    with pytest.raises(InvalidArgument, match="1 to 1024"):
        rq.build_target("/items/{item_id}", {}, {"item_id": ""}, {})


def test_query_values_are_encoded_whole() -> None:
    encoded = rq.encode_query({"to": "http://169.254.169.254/?a=b&c", "b": True, "f": 1.5})
    assert encoded == "to=http%3A%2F%2F169.254.169.254%2F%3Fa%3Db%26c&b=true&f=1.5"
    assert rq.encode_query({"k\r\nX": "v\r\n"}) == "k%0D%0AX=v%0D%0A"


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "169.254.169.254"},
        {"host": "127.0.0.1:5432"},
        {"Content-Length": "5"},
        {"Transfer-Encoding": "chunked"},
        {"Connection": "close"},
        {"Upgrade": "websocket"},
        {"Proxy-Authorization": "Basic x"},
        {"X-Forwarded-For": "10.0.0.1"},
        {"X-Forwarded-Host": "other"},
        {"Forwarded": "for=1.2.3.4"},
        {"X-AppDeck-Key-Id": "key_x"},
        {"X-API-Key": "adk_key_x"},
        {"Bad Name": "x"},
        {"X-Ok": "line\r\nHost: evil"},
        {"X-Ok": "tab\there"},
        {"X-Ok": "é"},
        {f"X-{i}": "v" for i in range(21)},
    ],
)
def test_a_header_that_could_redirect_spoof_or_smuggle_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument) as refused:
        rq.check_headers(headers)
    assert str(refused.value.details["field"]).startswith("headers")


def test_ordinary_headers_pass_as_given() -> None:
    given = {"Accept": "text/plain", "Authorization": "Bearer t", "X-Trace": "1"}
    assert rq.check_headers(given) == list(given.items())


def test_credentials_are_masked_when_shown() -> None:
    key = "adk_key_" + "s" * 40
    shown = dict(
        rq.masked(
            [("X-API-Key", key), ("Authorization", "Bearer secret"), ("Cookie", "a=b"), ("A", "b")]
        )
    )
    assert shown == {
        "X-API-Key": key[:12] + "…",
        "Authorization": "Bearer …",
        "Cookie": "…",
        "A": "b",
    }
    assert dict(rq.masked([("x-api-key", "short")])) == {"x-api-key": "…"}


def test_a_body_is_json_bounded_and_only_on_methods_that_carry_one() -> None:
    assert rq.encode_body("POST", {"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()
    assert rq.encode_body("GET", None) is None
    with pytest.raises(InvalidArgument, match="GET sends no body"):
        rq.encode_body("GET", {"a": 1})
    with pytest.raises(InvalidArgument, match="at most 262144"):
        rq.encode_body("POST", "x" * rq.MAX_BODY)
    with pytest.raises(InvalidArgument, match="JSON value"):
        rq.encode_body("POST", float("nan"))


@settings(max_examples=300, deadline=None)
@given(
    value=st.text(min_size=1, max_size=30)
    | st.sampled_from(["..", ".", "%2e%2e", "%2E.", ".%2e", "..%2f", "%252e%252e", "..;"]),
    query=st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=10), max_size=3),
)
def test_no_value_ever_yields_a_target_off_the_operations_path(
    value: str, query: dict[str, Any]
) -> None:
    try:
        target = rq.build_target("/items/{item_id}/parts", {}, {"item_id": value}, query)
    except InvalidArgument:
        return
    path = target.split("?", 1)[0]
    assert path.startswith("/items/")
    assert path.endswith("/parts")
    assert path.count("/") == 3
    assert target.isascii()
    assert target.isprintable()
    assert " " not in target
    segment = path.split("/")[2]
    for _ in range(4):
        assert segment not in (".", "..")
        segment = unquote(segment)
