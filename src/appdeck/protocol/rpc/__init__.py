"""JSON-RPC plumbing that knows nothing of MCP: the method table features register into."""
