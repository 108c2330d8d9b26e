"""GitHub's published REST description (the vendored subset in tests/fixtures/github/) as a
checker for an httpx mock transport: every request the adapter sends is validated against its
operation (method, path template, query and path parameters, JSON body, auth header), and the
answers served are the operation's own examples, checked against its response schema."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft4Validator

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "github"


def nullable(node: Any) -> Any:
    """OpenAPI 3.0 ``nullable: true`` as JSON Schema (``type: [t, "null"]``), recursively."""
    if isinstance(node, list):
        return [nullable(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: nullable(v) for k, v in node.items() if k not in ("nullable", "example")}
    if node.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        if "type" not in out:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass
class Operation:
    spec: dict[str, Any]

    @classmethod
    def load(cls, name: str) -> Operation:
        return cls(json.loads((FIXTURES / name).read_text()))

    @property
    def pattern(self) -> re.Pattern[str]:
        template = re.escape(self.spec["path"])
        return re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", template))

    def response(self, code: str) -> tuple[dict[str, Any], Any]:
        content = self.spec["responses"][code]["content"]["application/json"]
        return content["schema"], content["examples"]["default"]["value"]

    def check_response(self, code: str, body: Any) -> None:
        Draft4Validator(nullable(self.response(code)[0])).validate(body)

    def check_request(self, request: httpx.Request) -> None:
        assert request.method == self.spec["method"]
        assert request.url.host == "api.github.com"
        assert request.url.scheme == "https"
        match = self.pattern.fullmatch(request.url.path)
        assert match is not None, request.url.path
        for parameter in self.spec["parameters"]:
            schema = nullable(parameter["schema"])
            if parameter["in"] == "path":
                Draft4Validator(schema).validate(match.group(parameter["name"]))
            elif parameter["in"] == "query" and parameter["name"] in request.url.params:
                raw = request.url.params[parameter["name"]]
                value: Any = int(raw) if schema.get("type") == "integer" else raw
                Draft4Validator(schema).validate(value)
        names = {p["name"] for p in self.spec["parameters"] if p["in"] == "query"}
        assert set(request.url.params) <= names, request.url.params
        body = self.spec.get("requestBody")
        if body is not None:
            assert request.headers["content-type"] == "application/json"
            schema = body["content"]["application/json"]["schema"]
            Draft4Validator(nullable(schema)).validate(json.loads(request.content))
        else:
            assert request.content == b""
        assert request.headers["accept"] == "application/vnd.github+json"


@dataclass
class FakeGitHub:
    """The mock transport's handler: checks each request, answers with ``answer``."""

    operations: list[Operation]
    answer: Callable[[httpx.Request, Operation], httpx.Response]
    seen: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        for operation in self.operations:
            if operation.pattern.fullmatch(request.url.path):
                operation.check_request(request)
                return self.answer(request, operation)
        raise AssertionError(f"no such operation: {request.method} {request.url.path}")

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


STATUS = Operation.load("create-commit-status.json")
REPOS = Operation.load("list-for-authenticated-user.json")


def documented(request: httpx.Request, operation: Operation) -> httpx.Response:
    """The operation's own example answer (checked against its schema first); /user/repos
    in two pages, linked as GitHub does."""
    if operation is STATUS:
        _, example = STATUS.response("201")
        STATUS.check_response("201", example)
        return httpx.Response(201, json=example)
    _, example = REPOS.response("200")
    page = int(request.url.params.get("page", "1"))
    items = [{**example[0], "full_name": f"octocat/repo-{page}", "private": page == 2}]
    REPOS.check_response("200", items)
    headers = {}
    if page == 1:
        headers["Link"] = (
            '<https://api.github.com/user/repos?per_page=100&sort=pushed&page=2>; rel="next", '
            '<https://api.github.com/user/repos?per_page=100&sort=pushed&page=2>; rel="last"'
        )
    return httpx.Response(200, json=items, headers=headers)
