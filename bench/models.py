"""What wire models would cost on the hot path: hand-written dict checks (what AppDeck does)
against the official ``mcp-types`` pydantic models, for one tools/call request and its result.

Run: .venv/bin/python bench/models.py
"""

from __future__ import annotations

import timeit
from typing import Any

import mcp.types as mt
import orjson

from appdeck.protocol import jsonrpc

REQUEST = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hello"}, "_meta": {"progressToken": 7}},
    }
)


def ours() -> bytes:
    message: Any = orjson.loads(REQUEST)
    jsonrpc.classify(message)
    params = jsonrpc.params_of(message)
    text = params["arguments"]["text"]
    result = {"content": [{"type": "text", "text": text}]}
    return orjson.dumps(jsonrpc.result(message["id"], result))


def models() -> bytes:
    message: Any = mt.jsonrpc_message_adapter.validate_json(REQUEST)
    raw = message.model_dump(by_alias=True, exclude_none=True)
    request: Any = mt.client_request_adapter.validate_python(
        {"method": raw["method"], "params": raw["params"]}
    )
    params = request.params
    text = params.arguments["text"]
    result = mt.CallToolResult(content=[mt.TextContent(type="text", text=text)])
    response = mt.JSONRPCResponse(
        jsonrpc="2.0", id=7, result=result.model_dump(by_alias=True, exclude_none=True)
    )
    return response.model_dump_json(by_alias=True, exclude_none=True).encode()


def main() -> None:
    n = 20_000
    for name, fn in (("hand-written dicts + orjson", ours), ("mcp-types pydantic models", models)):
        fn()
        seconds = min(timeit.repeat(fn, number=n, repeat=5))
        print(f"{name:30s} {seconds / n * 1e6:7.2f} µs per tools/call request+response")


if __name__ == "__main__":
    main()
