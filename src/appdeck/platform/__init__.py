"""The domain: apps, specs, deployments, tables, APIs, repos. Knows nothing of MCP."""
