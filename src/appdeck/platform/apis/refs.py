"""JSON values, pointers and refs inside one OpenAPI document: what parsing, operations,
changes and fitting (the modules next to this one) share. Pure, no recursion."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, Final
from urllib.parse import unquote

METHODS: Final = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
REF_KEYS: Final = ("$ref", "$dynamicRef", "$recursiveRef")
RESOLVE_NODES: Final = 50_000
"""How many values one resolved operation holds at most (refs past it are left unexpanded)."""
RESOLVE_DEPTH: Final = 96
CUT: Final = "x-appdeck-cut"
"""The key of the marker that stands for a ``$ref`` not expanded: ``{"x-appdeck-cut":
"recursive", "ref": "#/..."}`` (it points back at itself) or ``"size"`` (over the bound)."""

Json = Any
"""A JSON value: dict, list, str, int, float, bool or None."""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def walk(value: Json, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object in ``value`` with its location (a JSON pointer), without recursion."""
    stack: list[tuple[Json, str]] = [(value, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            yield at, node
            stack.extend((v, f"{at}/{escape(k)}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{at}/{n}") for n, v in enumerate(node))


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def pointer(document: Json, ref: str) -> Json:
    """The value ``ref`` (``#/a/b``, percent-encoded as in a URI) points at; KeyError when it
    points at nothing."""
    return lookup(document, unquote(ref[1:]))


def lookup(document: Json, path: str) -> Json:
    if path == "":
        return document
    if not path.startswith("/"):
        raise KeyError(path)
    node = document
    for raw in path[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(path)
    return node
