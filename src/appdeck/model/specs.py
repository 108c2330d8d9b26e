"""The app spec: how an app is built, run, checked and rolled out. A JSON Schema validates it;
:func:`merge` applies a JSON merge patch (RFC 7396) and :func:`diff` says what changed."""

from __future__ import annotations

import copy
import re
from typing import Any, Final

from jsonschema import Draft202012Validator

from appdeck.common.errors import InvalidArgument

RUNTIMES: Final = ("python", "node", "static", "command")
STRATEGIES: Final = ("recreate", "rolling", "blue_green", "canary")
MAX_DOMAINS: Final = 20
"""Custom hostnames one app's spec may list (``domains``)."""
API_AUTH: Final = ("none", "required")
"""``api_auth``: whether the ingress asks for one of the app's API keys."""
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
"""An env var name (always ``fullmatch``: ``$`` would let a trailing newline through)."""
RESERVED_ENV: Final = frozenset({"PORT", "HOST", "DATABASE_URL"})
"""Set by the platform for every instance; an app cannot override them."""
_HEALTH_PATH: Final = re.compile(r"/[!-~]*")
"""Printable ASCII without spaces: the path goes into an HTTP request line."""

SPEC_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "AppDeck app spec",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "runtime": {"enum": list(RUNTIMES), "description": "How the app is built and run."},
        "source_path": {
            "anyOf": [{"type": "string", "maxLength": 4096}, {"type": "null"}],
            "description": "An absolute directory on the server holding the app's source, "
            "inside one of your tenant's source roots (a refusal's hint lists them); checked "
            "again at every deploy.",
        },
        "build_command": {"anyOf": [{"type": "string", "maxLength": 2000}, {"type": "null"}]},
        "run_command": {
            "anyOf": [{"type": "string", "maxLength": 2000}, {"type": "null"}],
            "description": "The command that serves HTTP on $PORT (not needed for static apps).",
        },
        "port": {
            "anyOf": [{"type": "integer", "minimum": 1, "maximum": 65535}, {"type": "null"}],
            "description": "The port the app listens on inside its own sandbox (every instance "
            "has a loopback of its own, so any port is free); never a port of the server. "
            "Leave null: the platform picks one and passes it as PORT, which apps should "
            "read.",
        },
        "network": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "outbound": {
                    "type": "boolean",
                    "description": "Let the app open TLS connections to public internet "
                    "addresses (through a proxy the platform sets as HTTPS_PROXY); never to "
                    "this host, private networks or other apps. Off by default; builds always "
                    "may (to fetch dependencies).",
                },
            },
        },
        "resources": {
            "type": "object",
            "additionalProperties": False,
            "description": "Limits of each instance (memory_mb, cpus, pids) and of the app's "
            "disk (disk_mb: its workspace, data and /tmp in all); the kernel enforces them (an "
            "instance over its memory is killed, and its log says so). The operator's ceilings "
            "and your tenant's quotas bound them: a refusal names the limit and its setting.",
            "properties": {
                "memory_mb": {"type": "integer", "minimum": 32, "maximum": 65536},
                "cpus": {"type": "number", "minimum": 0.05, "maximum": 64},
                "pids": {"type": "integer", "minimum": 16, "maximum": 32768},
                "disk_mb": {"type": "integer", "minimum": 64, "maximum": 1048576},
            },
        },
        "health_check": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "path": {"type": "string", "pattern": "^/", "maxLength": 512},
                "timeout_s": {"type": "number", "minimum": 0.1, "maximum": 300},
            },
        },
        "instances": {"type": "integer", "minimum": 1, "maximum": 10},
        "env": {
            "type": "object",
            "maxProperties": 200,
            "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,127}$"},
            "additionalProperties": {"type": "string", "maxLength": 4096},
            "description": "Non-secret defaults; env_vars values override them.",
        },
        "default_strategy": {"enum": list(STRATEGIES)},
        "ci": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "secrets": {
                    "type": "boolean",
                    "description": "Give CI runs and builds the app's secret env vars. Off by "
                    "default: they get only its non-secret ones. Only an admin or owner of "
                    "the app may turn it on (whoever can change the CI test command or the "
                    "build command can then print the secrets).",
                },
            },
        },
        "api_auth": {
            "enum": list(API_AUTH),
            "description": "Whether callers of the app's HTTP API need one of its API keys "
            "(manage_api_key). required: the ingress answers 401 to a request without a valid "
            "key (X-API-Key: <key> or Authorization: Bearer <key>) and 403 to a read-only key "
            "on a method other than GET/HEAD/OPTIONS; the app never sees the key, only "
            "X-AppDeck-Key-Id. none (the default): the ingress lets every request through. "
            "Takes effect at once, without a deploy.",
        },
        "domains": {
            "type": "array",
            "maxItems": MAX_DOMAINS,
            "uniqueItems": True,
            "items": {"type": "string", "minLength": 1, "maxLength": 253},
            "description": "Custom hostnames the app also answers at (shop.example.com): public "
            "DNS names, never under the platform's apps domain. Each belongs to one app across "
            "the platform and is served only once you prove you control it: get_app_url lists "
            "each with its state and the DNS TXT record to create (_appdeck-challenge.<domain>), "
            "and verify: true checks it now. [] removes them all.",
        },
        "canary": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "percent": {"type": "integer", "minimum": 1, "maximum": 50},
                "steps": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1, "maximum": 100},
                    "maxItems": 10,
                },
                "analysis_window_s": {"type": "number", "minimum": 0.1, "maximum": 3600},
                "max_error_rate": {"type": "number", "minimum": 0, "maximum": 1},
            },
        },
    },
}

# Nullable fields are ``anyOf [X, null]``, not ``type: [X, "null"]``: several MCP clients read
# ``type`` as one string (the MCP Inspector's schema-portability check warns about the array).


def patch_schema() -> dict[str, Any]:
    """What ``set_app_spec`` accepts as ``spec``: a JSON merge patch of the spec, where
    ``null`` on a top-level field resets it to its default. The spec it produces is then
    checked against :data:`SPEC_SCHEMA` as a whole."""
    properties: dict[str, Any] = {}
    for name, sub in SPEC_SCHEMA["properties"].items():
        resettable = isinstance(DEFAULTS.get(name), dict)  # merge() puts the default back
        properties[name] = _nullable(sub) if resettable else sub
        if resettable and sub.get("description"):
            properties[name]["description"] = sub["description"]
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "description": "Fields of the app spec to change; null resets a field to its default.",
    }


def full_schema() -> dict[str, Any]:
    """:data:`SPEC_SCHEMA` as it sits inside a tool's input schema (no ``$schema``)."""
    return {k: v for k, v in SPEC_SCHEMA.items() if k not in ("$schema", "title")}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in schema.items() if k != "description"}
    if "anyOf" in body and {"type": "null"} in body["anyOf"]:
        return body
    return {"anyOf": [body, {"type": "null"}]}


DEFAULT_DISK_MB: Final = 1024
"""``resources.disk_mb`` when a spec does not say (the operator's ceiling, if lower, instead:
:func:`with_disk_default`)."""

DEFAULTS: Final[dict[str, Any]] = {
    "runtime": "python",
    "source_path": None,
    "build_command": None,
    "run_command": None,
    "port": None,
    "health_check": {"path": "/", "timeout_s": 5},
    "resources": {"memory_mb": 512, "cpus": 1.0, "pids": 256, "disk_mb": DEFAULT_DISK_MB},
    "network": {"outbound": False},
    "instances": 1,
    "env": {},
    "default_strategy": "rolling",
    "ci": {"secrets": False},
    "api_auth": "none",
    "domains": [],
    "canary": {
        "percent": 10,
        "steps": [10, 50, 100],
        "analysis_window_s": 30,
        "max_error_rate": 0.05,
    },
}

_validator = Draft202012Validator(SPEC_SCHEMA)


def with_disk_default(disk_mb: int) -> dict[str, Any]:
    """:data:`DEFAULTS` with ``resources.disk_mb`` = ``disk_mb`` (the operator's ceiling)."""
    defaults: dict[str, Any] = json_copy(DEFAULTS)
    defaults["resources"]["disk_mb"] = disk_mb
    return defaults


def complete(spec: dict[str, Any], *, disk_mb: int = DEFAULT_DISK_MB) -> dict[str, Any]:
    """A stored spec with the defaults of fields it predates filled in."""
    defaults = with_disk_default(disk_mb)
    return merge(defaults, spec, defaults)


def validate(spec: Any, *, disk_mb: int = DEFAULT_DISK_MB) -> dict[str, Any]:
    """The complete spec (defaults filled in, ``disk_mb`` the default of
    ``resources.disk_mb``); :class:`InvalidArgument` names the problem."""
    if not isinstance(spec, dict):
        raise InvalidArgument("the spec must be an object")
    error = next(iter(sorted(_validator.iter_errors(spec), key=lambda e: list(e.path))), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(spec)"
        raise InvalidArgument(
            f"invalid spec at {where}: {error.message}"[:500],
            hint="read appdeck://apps/{app_id}/spec or the set_app_spec input schema for the shape",
        )
    problem = _beyond_schema(spec)
    if problem is not None:
        where, message = problem
        raise InvalidArgument(f"invalid spec at {where}: {message}"[:500], field=f"spec/{where}")
    return complete(spec, disk_mb=disk_mb)


def _beyond_schema(spec: dict[str, Any]) -> tuple[str, str] | None:
    """What JSON Schema cannot say (its ``pattern`` searches, and ``$`` matches before a final
    newline): (where, what) of the first problem, or None."""
    nul = _nul_at(spec, "")
    if nul is not None:
        return nul or "(spec)", "contains a NUL character"
    env = spec.get("env")
    for name in env if isinstance(env, dict) else ():
        if not ENV_NAME.fullmatch(name):
            return f"env/{name}", "not a valid env var name (letters, digits and _)"
        if name in RESERVED_ENV:
            return f"env/{name}", f"{name} is set by the platform for every instance"
    health = spec.get("health_check")
    path = health.get("path") if isinstance(health, dict) else None
    if isinstance(path, str) and not _HEALTH_PATH.fullmatch(path):
        return "health_check/path", "must start with / and hold no spaces or control characters"
    return None


def _nul_at(value: Any, where: str) -> str | None:
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _nul_at(key, where) if isinstance(key, str) else None
            found = found if found is not None else _nul_at(item, f"{where}/{key}".lstrip("/"))
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _nul_at(item, f"{where}/{i}".lstrip("/"))
            if found is not None:
                return found
    return None


def merge(
    base: dict[str, Any], patch: dict[str, Any], defaults: dict[str, Any] = DEFAULTS
) -> dict[str, Any]:
    """RFC 7396 JSON merge patch: objects merge, ``null`` on a key that has a default object
    resets it (to ``defaults``'), any other value replaces."""
    out: dict[str, Any] = json_copy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "env":
            out[key] = merge(out[key], value)
        elif value is None and isinstance(defaults.get(key), dict):
            out[key] = json_copy(defaults[key])
        else:
            out[key] = json_copy(value)
    return out


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (objects and arrays copied, everything else shared, as
    ``copy.deepcopy`` shares immutable values): a spec is completed at every load of a
    release, and ``deepcopy``'s memo and dispatch cost several times this walk."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return copy.deepcopy(value)  # not JSON: as before


def diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """The leaf-level changes from ``before`` to ``after`` as ``{path, from, to}``."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[dict[str, Any]] = []
        for key in sorted(set(before) | set(after)):
            changes += diff(before.get(key), after.get(key), f"{path}/{key}")
        return changes
    if before == after:
        return []
    return [{"path": path or "/", "from": before, "to": after}]
