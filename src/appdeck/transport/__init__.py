"""HTTP transport: Streamable HTTP at ``/mcp`` (raw ASGI), and the other routes (Starlette)."""
