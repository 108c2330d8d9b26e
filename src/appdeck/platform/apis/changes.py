"""What changed between two versions of a document: operations added, removed and changed
(changed: its resolved form differs; schemas that refer to each other are hashed as one
group, so the answer does not depend on which operation reached them first)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from appdeck.platform.apis.operations import path_items
from appdeck.platform.apis.refs import (
    METHODS,
    Json,
    digest,
    lookup,
    walk,
)

# -- what changed ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Changes:
    added: list[str]
    removed: list[str]
    changed: list[str]
    """Operations as ``"GET /items/{item_id}"``; changed: the resolved operation differs."""


def diff(old: dict[str, Any] | None, new: dict[str, Any]) -> Changes:
    before = fingerprints(old) if old is not None else {}
    after = fingerprints(new)
    return Changes(
        added=sorted(after.keys() - before.keys()),
        removed=sorted(before.keys() - after.keys()),
        changed=sorted(k for k in after.keys() & before.keys() if after[k] != before[k]),
    )


def fingerprints(document: dict[str, Any]) -> dict[str, str]:
    """A digest per operation of what it resolves to (its object, its path's parameters, and
    what their refs point at, recursively) without expanding anything. Each ref target is
    hashed once, after the targets it refers to (a Merkle hash: a renamed but identical
    component changes nothing); the refs of a ring (schemas that refer to each other) are
    hashed as one whole, so the digests are the same whichever operation reaches them first
    (renaming a member of a ring does count as a change)."""
    table = _ref_digests(document)
    found = {}
    for path, item in path_items(document):
        shared = item.get("parameters")
        for method in METHODS:
            op = item.get(method)
            if isinstance(op, dict):
                value = {"operation": op, "path_parameters": shared}
                found[f"{method.upper()} {path}"] = _hash(_shape(value, table, frozenset()))
    return found


def _hash(value: Json) -> str:
    return digest(json.dumps(value, sort_keys=True, separators=(",", ":")))


def _ref_key(ref: str) -> str:
    """One spelling per place (``#/a%20b`` and ``#/a b`` are the same)."""
    return "#" + unquote(ref[1:])


def _refs_in(value: Json) -> set[str]:
    return {
        _ref_key(node["$ref"])
        for _, node in walk(value)
        if isinstance(node.get("$ref"), str) and node["$ref"].startswith("#")
    }


def _shape(value: Json, table: dict[str, str], ring: frozenset[str]) -> Json:
    """``value`` with each ref replaced by its target's digest (a ref into ``ring`` stays)."""
    if isinstance(value, list):
        return [_shape(v, table, ring) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _shape(v, table, ring) for k, v in value.items() if k != "$ref"}
    ref = value.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        key = _ref_key(ref)
        out["$ref"] = key if key in ring else table.get(key, f"missing:{key}")
    elif "$ref" in value:
        out["$ref"] = _shape(value["$ref"], table, ring)
    return out


def _ref_digests(document: dict[str, Any]) -> dict[str, str]:
    """The digest of every ref's target, rings (strongly connected refs) hashed whole."""
    targets: dict[str, Json] = {}
    for key in sorted(_refs_in(document)):
        try:
            targets[key] = lookup(document, key[1:])
        except KeyError:
            continue
    edges = {key: sorted(_refs_in(target) & targets.keys()) for key, target in targets.items()}
    table: dict[str, str] = {}
    for ring in _rings(edges):  # each after every ring it refers to
        if len(ring) == 1 and ring[0] not in edges[ring[0]]:
            table[ring[0]] = _hash(_shape(targets[ring[0]], table, frozenset()))
            continue
        members = frozenset(ring)
        whole = _hash([[key, _shape(targets[key], table, members)] for key in sorted(ring)])
        for key in ring:
            table[key] = _hash([whole, key])
    return table


def _rings(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, without recursion, in reverse topological
    order (a component comes after every component it has an edge to)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, at = work.pop()
            if at == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for n in range(at, len(edges[node])):
                nxt = edges[node][n]
                if nxt not in index:
                    work.append((node, n + 1))
                    work.append((nxt, 0))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                if low[node] == index[node]:
                    ring = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        ring.append(member)
                        if member == node:
                            break
                    found.append(ring)
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return found
