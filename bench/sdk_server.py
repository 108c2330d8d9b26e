"""Reference server: the official MCP Python SDK's LOW-LEVEL ``Server`` with one echo tool.

Streamable HTTP at ``/mcp``, JSON response mode, stateful (``stateless_http=False``), served by
uvicorn with httptools and uvloop like AppDeck. Based on the tested snippet in the spec notes
(§6.3). The SDK's defaults are kept (max_sessions=10,000, session_idle_timeout=30 min).

    python bench/sdk_server.py --port 18765
"""

from __future__ import annotations

import argparse

import mcp.types as types
import uvicorn
from mcp.server import Server

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}


async def list_tools(ctx: object, params: object) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[types.Tool(name="echo", description="Echo the given text", input_schema=ECHO_SCHEMA)]
    )


async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = (params.arguments or {}).get("text", "")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def build_app() -> object:
    server = Server("echo-bench", version="0.0.1", on_list_tools=list_tools, on_call_tool=call_tool)
    return server.streamable_http_app(
        streamable_http_path="/mcp", json_response=True, stateless_http=False
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18765)
    args = parser.parse_args()
    uvicorn.run(
        build_app(),  # type: ignore[arg-type]
        host=args.host,
        port=args.port,
        http="httptools",
        loop="uvloop",
        access_log=False,
        log_config=None,
        log_level="warning",
        lifespan="on",  # the SDK's session manager runs inside the Starlette lifespan
        server_header=False,
    )


if __name__ == "__main__":
    main()
