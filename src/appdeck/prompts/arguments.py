"""What every prompt shares: its arguments checked (bounded, printable, from a known set),
its steps written as tool calls with JSON arguments, and the user message around them.

A prompt's argument arrives as a string (prompts/get allows nothing else); a bad one is
:class:`InvalidArgument` naming it, which prompts/get answers as -32602 with ``data.code``
``invalid_argument``.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from typing import Any

from appdeck.common.errors import InvalidArgument

JsonObject = dict[str, Any]

STRATEGIES = ("recreate", "rolling", "blue_green", "canary")
AS_TASK = "as a task (task in the request: params.task, or arguments.task) and follow it to its end"


def user(text: str) -> JsonObject:
    return {"role": "user", "content": {"type": "text", "text": text}}


def workflow(description: str, head: str, steps: list[str], tail: str = "") -> JsonObject:
    """The GetPromptResult of a workflow: one user message, ``head`` then the numbered steps."""
    numbered = "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
    body = f"{head}\nSteps:\n{numbered}" + (f"\n{tail}" if tail else "")
    return {"description": description, "messages": [user(body)]}


APP_ID = "<app_id>"
"""Stands for an app id the agent learns on the way (unquoted: it is a number)."""


def call(tool: str, **arguments: Any) -> str:
    """A step the agent takes: the tool's name and its arguments as JSON (``APP_ID`` where
    the id is not known yet)."""
    return f"{tool} {json.dumps(arguments)}".replace(json.dumps(APP_ID), APP_ID)


def text(args: dict[str, str], name: str, *, limit: int, default: str = "") -> str:
    """The argument ``name``, at most ``limit`` characters, without NUL or other control
    characters (a newline or tab included: each is one line of the prompt's text)."""
    value = args.get(name) or default
    if len(value) > limit:
        raise InvalidArgument(f"{name} is longer than {limit} characters", field=name)
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise InvalidArgument(
            f"{name} may not hold NUL, newlines or other control characters", field=name
        )
    return value


def choice(
    args: dict[str, str], name: str, options: Sequence[str], default: str | None
) -> str | None:
    value = args.get(name) or default
    if value is not None and value not in options:
        raise InvalidArgument(f"{name} must be one of {', '.join(options)}", field=name)
    return value


def flag(args: dict[str, str], name: str) -> bool:
    value = choice(args, name, ("true", "false"), "false")
    return value == "true"


def app_id(args: dict[str, str]) -> int:
    raw = args.get("app_id", "")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18 or int(raw) < 1:
        raise InvalidArgument("app_id must be a number (an app's id)", field="app_id")
    return int(raw)
