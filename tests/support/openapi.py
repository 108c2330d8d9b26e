"""OpenAPI documents the checks' tests share."""

from __future__ import annotations

from typing import Any


def slow_to_validate() -> dict[str, Any]:
    """57 KB of OpenAPI 3.1 that takes over a second of CPU to validate."""
    field = {"type": "string", "pattern": "^[a-z]+$"}
    schema = {"type": "object", "properties": {f"f{j}": field for j in range(20)}}
    ok = {"description": "ok", "content": {"application/json": {"schema": schema}}}
    paths = {f"/p{i}": {"get": {"responses": {"200": ok}}} for i in range(50)}
    return {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": paths}
