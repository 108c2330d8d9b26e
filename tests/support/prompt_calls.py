"""The tool calls a workflow prompt writes (``tool {json}``), for tests that check or follow
them."""

from __future__ import annotations

import json
import re
from typing import Any

from appdeck.prompts.arguments import APP_ID

_CALL = re.compile(r"\b([a-z][a-z_]*[a-z]) \{")


def calls(text: str, app_id: int = 1) -> list[tuple[str, dict[str, Any]]]:
    """Each ``tool {json}`` in ``text``, in order (an app id not known yet as ``app_id``)."""
    text = text.replace(APP_ID, str(app_id))
    found = []
    for m in _CALL.finditer(text):
        arguments, _ = json.JSONDecoder().raw_decode(text, m.end() - 1)
        found.append((m.group(1), arguments))
    return found
