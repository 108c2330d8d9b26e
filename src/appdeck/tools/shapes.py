"""What every tool result looks like: a short text summary plus ``structuredContent``."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

from appdeck.common.errors import InvalidArgument

JsonObject = dict[str, Any]

APP_ID: Final[JsonObject] = {
    "type": "integer",
    "minimum": 1,
    "description": "The app's id (from register_app or list_my_apps).",
}


def ok(summary: str, data: JsonObject) -> JsonObject:
    """A CallToolResult: ``summary`` for the model, ``data`` as structured content (and as JSON
    text too, for clients that only read text)."""
    return {
        "content": [{"type": "text", "text": f"{summary}\n{json.dumps(data, default=str)}"}],
        "structuredContent": data,
    }


def hints(*, read_only: bool, destructive: bool = False, idempotent: bool = False) -> JsonObject:
    return {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": False,
    }


def obj(properties: JsonObject, required: list[str] | None = None) -> JsonObject:
    schema: JsonObject = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"c:{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> int:
    if cursor is None:
        return 0
    try:
        assert isinstance(cursor, str)
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, _, number = text.partition(":")
        offset = int(number)
        assert tag == "c"
        assert offset >= 0
    except (AssertionError, ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument(
            "invalid cursor", hint="pass the next_cursor of a previous page"
        ) from None
    return offset
